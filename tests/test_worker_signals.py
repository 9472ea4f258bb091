"""``SignalWaiter`` across a fork: a signal sent to a forked child before the child has put its
dispositions back is neither lost nor read by the worker as its own.

Each case runs in an interpreter of its own (a waiter installs handlers and fork hooks for the
life of its process). A hook registered before the waiter's runs first in the child, so its
``os.kill`` lands exactly in the window between the fork and the waiter's own hook.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent("""
    import json, os, select, signal, sys, threading

    os.register_at_fork(after_in_child=lambda: os.kill(os.getpid(), signal.SIGTERM))
    from echomq.worker.signals import SignalWaiter
    waiter = SignalWaiter((signal.SIGTERM, signal.SIGINT))
    seen = {}

    def fork():
        pid = os.fork()
        if pid == 0:
            os._exit(0)  # reached only when the early SIGTERM was lost
        seen["status"] = os.waitpid(pid, 0)[1]
        seen["mask"] = sorted(signal.pthread_sigmask(signal.SIG_BLOCK, []))

    if sys.argv[1] == "thread":
        thread = threading.Thread(target=fork)
        thread.start()
        thread.join()
    else:
        fork()
    readable = select.select([waiter._source], [], [], 0)[0]
    status = seen["status"]
    os.kill(os.getpid(), signal.SIGINT)
    print(json.dumps({
        "killed_by": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "woke_the_parent": bool(readable),
        "mask_after": seen["mask"],
        "parent_still_waits": waiter.wait(),
    }))
""")


@pytest.mark.parametrize("forked_from", ["main", "thread"])
def test_a_signal_reaching_a_forked_child_before_its_hook_still_ends_it(forked_from: str) -> None:
    done = subprocess.run([sys.executable, "-c", CHILD, forked_from], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["killed_by"] == 15, seen  # SIGTERM's default action, not exit(0)
    assert not seen["woke_the_parent"], seen  # the child wrote nothing to the worker's socket
    assert seen["mask_after"] == [], seen  # the forking thread's mask is as it was
    assert seen["parent_still_waits"] == 2, seen  # and the worker still hears its own SIGINT
