"""A node cut off from the control plane (issue 29 §3), with real agent processes: back, it
stops the runs released while it was away; with ``--fence-after-s`` it stops its runs
itself while cut off, and reports their ends once back; without, they go on."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from agent.fencing import Fence, to_stop
from agent.state import ENDED, LAUNCHED, RUNNING, RunRecord
from tests.agent.conftest import AgentProcess
from tests.agent.fake_control_plane import FakeControlPlane
from tests.agent.test_runs import group_gone

StartAgent = Callable[..., AgentProcess]
GPU0 = [{"index": 0, "uuid": "GPU-a"}]


def started_pid(plane: FakeControlPlane, assignment_id: str) -> int:
    plane.wait_for(lambda: bool(plane.reports(assignment_id, "started")))
    return int(plane.reports(assignment_id, "started")[0]["pid"])


# --- when to fence ---------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("after_s", "silent_s", "due"),
    [(0, 3600, False), (30, 30, False), (30, 30.5, True)],
    ids=["off", "at-the-limit", "past-it"],
)
def test_a_fence_is_due_only_past_its_silence(after_s: float, silent_s: float, due: bool) -> None:
    clock = Clock()
    fence = Fence(after_s, clock)
    clock.now += silent_s

    assert fence.due() is due


def test_a_fence_is_due_once_per_silence_and_lifted_by_a_heartbeat() -> None:
    clock = Clock()
    fence = Fence(30, clock)
    clock.now += 31

    first, again = fence.due(), fence.due()
    fence.heard()
    clock.now += 29
    heard_since = fence.due()
    clock.now += 2

    assert (first, again, heard_since, fence.due()) == (True, False, False, True)


def test_a_fence_stops_the_runs_alive_and_not_being_stopped() -> None:
    records = [
        RunRecord(assignment_id="launched", runtime="process", phase=LAUNCHED),
        RunRecord(assignment_id="running", runtime="process", phase=RUNNING),
        RunRecord(assignment_id="stopping", runtime="process", phase=RUNNING),
        RunRecord(assignment_id="ended", runtime="process", phase=ENDED),
    ]
    records[2].stop_requested_at = 1.0

    assert [r.assignment_id for r in to_stop(records)] == ["launched", "running"]


# --- real agents -----------------------------------------------------------------------------


def test_back_from_a_partition_it_stops_the_runs_released_meanwhile(
    plane: FakeControlPlane, start_agent: StartAgent
) -> None:
    plane.assign("a1", argv=["sh", "-c", "exec sleep 60"], gpus=GPU0)
    start_agent()
    pgid = started_pid(plane, "a1")

    plane.stop()  # cut off; the control plane fails the node and requeues its work
    time.sleep(1.5)  # past the long poll in flight (--poll-wait-s 1), which would tell it
    plane.release("a1")
    plane.accepting_work = False
    time.sleep(1.0)
    alive_while_away = not group_gone(pgid)
    plane.start()
    plane.wait_for(lambda: plane.ended("a1"))

    assert alive_while_away  # no fence: it went on
    (exited,) = plane.reports("a1", "exited")
    assert (exited["exit_code"], exited["signal"]) == (None, 15)
    plane.wait_for(lambda: group_gone(pgid), timeout=3)


def test_an_agent_cut_off_past_its_fence_stops_its_runs_and_reports_them_once_back(
    plane: FakeControlPlane, start_agent: StartAgent
) -> None:
    plane.assign(
        "a1", argv=["sh", "-c", "trap '' TERM; sleep 60 & wait; sleep 60"], stop_grace_s=0.5
    )
    plane.assign("a2", argv=["sh", "-c", "exec sleep 60"], gpus=GPU0)
    agent = start_agent("--fence-after-s", "1")
    pgids = [started_pid(plane, "a1"), started_pid(plane, "a2")]

    plane.stop()
    plane.wait_for(lambda: all(map(group_gone, pgids)), timeout=10)
    plane.assign("a3", argv=["true"])  # new work waits for the control plane's answer
    time.sleep(0.5)
    not_started = not (agent.state_dir / "runs" / "a3").exists()
    plane.start()
    plane.wait_for(lambda: plane.ended("a1") and plane.ended("a2") and plane.ended("a3"))

    assert not_started
    signals = [plane.reports(a, "exited")[0]["signal"] for a in ("a1", "a2")]
    assert signals == [9, 15]  # the one ignoring SIGTERM killed after its grace
    assert [r["kind"] for r in plane.reports("a3")] == ["started", "exited"]
    assert "--fence-after-s" in agent.log()
    assert "fence lifted" in agent.log()


def test_without_a_fence_runs_go_on_however_long_the_partition(
    plane: FakeControlPlane, start_agent: StartAgent
) -> None:
    plane.assign("a1", argv=["sh", "-c", "sleep 3; echo done"])
    start_agent()
    pgid = started_pid(plane, "a1")

    plane.stop()
    time.sleep(2.0)
    alive = not group_gone(pgid)
    plane.start()
    plane.wait_for(lambda: plane.ended("a1"))

    assert alive
    assert plane.reports("a1", "exited")[0]["exit_code"] == 0
    assert plane.output("a1") == b"done\n"
