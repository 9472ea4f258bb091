"""``echomq cancel QUEUE ID``, the real command in its own process on both wires: one line with
the verdict (``--json`` too); a bad id is one error line and a hint, exit 2, nothing sent; a job
that is not there exits 1."""

from __future__ import annotations

import json

import pytest
import redis

from echomq import Queue
from echomq.embedded import EmbeddedValkey
from tests.test_cli import assert_one_error, echomq


@pytest.mark.parametrize("wire", ["6"])
def test_cancel_prints_the_verdict(valkey: EmbeddedValkey, conn: redis.Redis,
                                   wire: str) -> None:
    queue = Queue(conn, "mail", wire=int(wire))
    queue.enqueue("JOB:waiting", b"")
    queue.enqueue("JOB:held", b"")
    done = echomq("cancel", "mail", "JOB:waiting", "--wire", wire, url=valkey.url)
    assert (done.returncode, done.stdout, done.stderr) == (0, "CANCELLED JOB:waiting\n", "")
    assert queue.claim() is not None  # JOB:held, leased
    answer = echomq("cancel", "mail", "JOB:held", "--json", "--wire", wire, url=valkey.url)
    assert answer.returncode == 0, answer.stderr
    assert json.loads(answer.stdout) == {"id": "JOB:held", "verdict": "CANCELLING"}
    assert queue.outcome("JOB:waiting").state == "cancelled"


def test_a_bad_id_is_one_line_and_exit_2_and_a_missing_job_exit_1(
        valkey: EmbeddedValkey) -> None:
    assert_one_error(echomq("cancel", "mail", "not-an-id", url=valkey.url), 2, "JOB:")
    assert_one_error(echomq("cancel", "mail", "JOB:nothere", url=valkey.url), 1,
                     "no job JOB:nothere in queue mail", "echomq stats mail")
