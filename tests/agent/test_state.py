"""The state directory: reports keep their seq across restarts until acknowledged."""

from __future__ import annotations

import json
from pathlib import Path

from agent.state import RUNNING, RunRecord, State


def test_reports_wait_in_the_outbox_until_acknowledged_across_restarts(tmp_path: Path) -> None:
    state = State(tmp_path)
    record = RunRecord(assignment_id="a1", runtime="process", phase=RUNNING)
    state.save(record)
    state.enqueue(record, "started", pid=1)
    state.enqueue(record, "exited", exit_code=0)

    again = State(tmp_path)

    assert [(r["kind"], r["seq"]) for r in again.outbox()] == [("started", 1), ("exited", 2)]
    again.acknowledge("a1", 1)
    assert [r["seq"] for r in State(tmp_path).outbox()] == [2]


def test_a_seq_queued_but_not_saved_in_the_record_is_not_used_again(tmp_path: Path) -> None:
    state = State(tmp_path)
    record = RunRecord(assignment_id="a1", runtime="process")
    state.save(record)
    state.enqueue(record, "started")
    # A crash after the outbox write, before the record's seq was saved:
    path = tmp_path / "runs" / "a1" / "run.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"last_seq": 0}))

    again = State(tmp_path)
    restored = again.get("a1")
    assert restored is not None
    report = again.enqueue(restored, "exited")

    assert report["seq"] == 2


def test_records_are_remembered_after_they_end(tmp_path: Path) -> None:
    state = State(tmp_path)
    state.save(
        RunRecord(assignment_id="a1", runtime="process", phase="ended", exit={"exit_code": 0})
    )

    record = State(tmp_path).get("a1")

    assert record is not None
    assert (record.phase, record.exit) == ("ended", {"exit_code": 0})
