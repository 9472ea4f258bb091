"""The demo runs end to end on the embedded server and shows what it claims to show."""

from __future__ import annotations

from echomq.demo import GREEDY, run_demo


def test_demo_shows_lanes_serving_small_tenants_first() -> None:
    said: list[str] = []
    lanes, fifo = run_demo(greedy_jobs=300, tenants=3, per_tenant=10, workers=2,
                           say=said.append)
    for run in (lanes, fifo):
        assert sum(run.done.values()) == run.total == 330
        assert set(run.finished_at) == {GREEDY, "tenant-0", "tenant-1", "tenant-2"}
    small = [lanes.finished_at[f"tenant-{t}"] for t in range(3)]
    assert max(small) < lanes.finished_at[GREEDY]
    assert any("each tenant's wait" in line for line in said)
    assert any(line.startswith("throughput") for line in said)
