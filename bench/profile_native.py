"""Profile the native module's enqueue and claim with perf: ``python -m bench.profile_native``.

Starts a private valkey-server with trafikey, records ``perf record -g`` on it while
``valkey-cli --pipe`` sends N native enqueues, then N native claims, and prints the top of
``perf report`` for each (self time by symbol). Needs /usr/bin/perf."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

from bench.common import claim_cmd, enqueue_cmd, ids, resp, running_server

N = int(os.environ.get("PROFILE_JOBS", "400000"))


def record(pid: int, port: int, commands: list[list[object]], workdir: str, name: str) -> str:
    path = os.path.join(workdir, f"{name}.resp")
    with open(path, "wb") as out:
        for command in commands:
            out.write(resp(command))
    data = os.path.join(workdir, f"{name}.data")
    perf = subprocess.Popen(["perf", "record", "-a", "-g", "-F", "999", "-o", data],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    with open(path, "rb") as source:
        subprocess.run(["/usr/bin/valkey-cli", "-p", str(port), "--pipe"], stdin=source,
                       stdout=subprocess.DEVNULL, check=True)
    perf.send_signal(2)
    _, err = perf.communicate()
    if perf.returncode not in (0, -2):
        return f"perf record failed: {err[-1000:]}"
    report = subprocess.run(["perf", "report", "-i", data, "--no-children", "--stdio",
                             "--comms", "valkey-server", "--sort", "dso,symbol", "-g", "none",
                             "--percent-limit", "0.25"],
                            capture_output=True, text=True, check=False)
    if not report.stdout.strip():
        return report.stderr[-2000:]
    return "\n".join(line for line in report.stdout.splitlines()
                     if line.strip() and not line.startswith("#"))


def main() -> int:
    with running_server() as server, tempfile.TemporaryDirectory(prefix="emq-prof-") as workdir:
        pid = 0  # perf records the whole machine; the report keeps valkey-server
        base = "emq:{prof}:"
        jobs = ids("prof", N)
        print(f"== EMQ.ENQUEUE x {N:,}")
        print(record(pid, server.port, [enqueue_cmd(base, 6, j, b"noop") for j in jobs],
                     workdir, "enqueue"))
        print(f"\n== EMQ.CLAIM x {N:,}")
        print(record(pid, server.port, [claim_cmd(base, 6) for _ in jobs], workdir, "claim"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
