"""The App of the chord-under-kills scenario (tests/reliability/test_chord_kills.py), served by
``echomq worker tests.chord_app:app`` processes: its server, wire and ledger come from the
environment. Each handler appends a line to the ledger (one ``write`` on an ``O_APPEND`` file:
whole or absent when its process is killed) before its job is acked."""

from __future__ import annotations

import json
import os

import redis

import echomq

app = echomq.App(redis.Redis.from_url(os.environ["ECHOMQ_CHORD_URL"], socket_timeout=10),
                 "chord", wire=int(os.environ["ECHOMQ_CHORD_WIRE"]), max_attempts=10_000)


def note(entry: dict[str, object]) -> None:
    line = (json.dumps(entry) + "\n").encode()
    handle = os.open(os.environ["ECHOMQ_CHORD_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(handle, line)
    finally:
        os.close(handle)


@app.task(name="child")
def child(n: int) -> int:
    note({"child": n})
    return n * 2


@app.task(name="fanin")
def fanin(values: list[int]) -> int:
    note({"fanin": len(values), "whole": values == [2 * n for n in range(len(values))]})
    return sum(values)
