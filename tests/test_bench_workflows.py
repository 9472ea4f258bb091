"""The bench's workflows phase runs with tiny counts on the suite's server and writes its rows:
the join's cost per wire (the children's extra key write counted by the dirty counter), the
chord drain beside the flat one, and each chord of the peers' table, measured or said why not."""

from __future__ import annotations

from typing import Any

from bench import workflow_report, workflows
from echomq.embedded import EmbeddedValkey

TINY = {"flow_settles": 40, "flow_fan_in": 10, "flow_chord": 30, "flow_peer_chord": 10,
        "flow_reps": 1}


def test_the_phase_runs_and_writes_its_rows(valkey: EmbeddedValkey) -> None:
    conn = valkey.client()
    try:
        save = conn.config_get("save")["save"]
        data: dict[str, Any] = workflows.run(conn, valkey.port, TINY)
        assert conn.config_get("save")["save"] == save  # the saves are as they were
    finally:
        conn.flushall()
        conn.close()
    table = data["join"]["table"]
    for wire in ("6", "5"):
        assert table[f"child/{wire}"]["extra_writes"] == 1.0  # the join's one HINCRBY
        assert table[f"last/{wire}"]["extra_writes"] > 1.0  # and the body's move to pending
        assert set(data["throughput"]["table"][wire]) >= {"chord", "flat", "ratio"}
        assert data["peers"][f"echomq wire={wire}"]["seconds"] > 0
    assert data["join"]["hincrby"]["writes"] == 1.0
    celery = data["peers"]["celery"]
    assert "seconds" in celery or celery["error"]
    results = {"workflows": data}
    text = workflow_report.section(results)
    assert "| child (not the last) | 6 |" in text
    assert "| last child (releases the body) | 5 |" in text
    assert "| echomq wire=6 checkout | 10 |" in text
    assert ("| celery " in text) and ("could not run here" in text) == ("error" in celery)
    rows = workflow_report.targets(results)
    assert [row[2] for row in rows] == ["**met**", "**met**"]
