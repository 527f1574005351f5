"""Real agent processes against the fake control plane: runs, their output, their ends."""

from __future__ import annotations

import calendar
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.state import STARTING, RunRecord, State
from tests.agent.conftest import NODE_ID, AgentProcess
from tests.agent.fake_control_plane import FakeControlPlane

StartAgent = Callable[..., AgentProcess]


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_run_sees_its_gpus_and_its_exit_code_is_reported(
    plane: FakeControlPlane, start_agent: StartAgent
) -> None:
    script = (
        'echo "cuda=$CUDA_VISIBLE_DEVICES nv=$NVIDIA_VISIBLE_DEVICES order=$CUDA_DEVICE_ORDER'
        ' indices=$NEOCLOUD_GPU_INDICES rank=$NODE_RANK secret=${#HF_TOKEN}"; exit 3'
    )
    plane.assign(
        "a1",
        argv=["sh", "-c", script],
        gpus=[{"index": 2, "uuid": "GPU-x"}, {"index": 3, "uuid": "GPU-y"}],
        env={"HF_TOKEN": "hf_s3cr3t_value", "NODE_RANK": "1"},
    )

    agent = start_agent()
    plane.wait_for(lambda: plane.ended("a1"))

    started, exited = plane.reports("a1")
    assert (started["kind"], started["seq"], exited["kind"], exited["seq"]) == (
        "started", 1, "exited", 2,
    )  # fmt: skip
    assert started["pid"] > 0
    assert (exited["exit_code"], exited["signal"], exited["oom"]) == (3, None, False)
    assert plane.output("a1") == (
        b"cuda=2,3 nv=2,3 order=PCI_BUS_ID indices=2,3 rank=1 secret=15\n"
    )
    assert "hf_s3cr3t_value" not in agent.log()


def test_heartbeats_report_fake_gpus_marked_fake(
    plane: FakeControlPlane, start_agent: StartAgent
) -> None:
    start_agent()
    plane.wait_for(lambda: len(plane.heartbeats) >= 2)

    beat = plane.heartbeats[-1]
    assert beat["agent"]["fake_gpus"] is True
    assert beat["agent"]["runtime"] == "process"
    assert beat["agent"]["address"] == "127.0.0.1"
    assert [(g["index"], g["uuid"], g["utilization_pct"]) for g in beat["gpus"]] == [
        (i, f"GPU-fake-{NODE_ID[:8]}-{i}", 0.0) for i in range(4)
    ]
    assert {g["model"] for g in beat["gpus"]} == {"NVIDIA A100-SXM4-80GB"}


def test_output_arrives_complete_and_in_order_before_the_exit(
    plane: FakeControlPlane, start_agent: StartAgent
) -> None:
    plane.assign("a1", argv=["sh", "-c", "seq 1 40000; echo done >&2"])

    start_agent()
    plane.wait_for(lambda: plane.ended("a1"))

    expected = "".join(f"{n}\n" for n in range(1, 40001)) + "done\n"
    assert plane.output("a1") == expected.encode()
    assert plane.logs_at_end["a1"] == len(expected)  # all of it there when `exited` came


def test_output_past_the_cap_is_counted_as_dropped(
    plane: FakeControlPlane, start_agent: StartAgent
) -> None:
    plane.assign("a1", argv=["sh", "-c", "seq 1 1000"])  # 3893 bytes

    start_agent("--log-max-bytes", "1000")
    plane.wait_for(lambda: plane.ended("a1"))

    assert plane.output("a1") == "".join(f"{n}\n" for n in range(1, 1001)).encode()[:1000]
    assert plane.dropped["a1"] == 3893 - 1000


@pytest.mark.parametrize(
    ("script", "signum"),
    [("exec sleep 30", 15), ("trap '' TERM; sleep 30 & wait; sleep 30", 9)],
    ids=["ends-on-sigterm", "ignores-sigterm-then-killed"],
)
def test_a_stopped_run_leaves_nothing_of_its_group(
    plane: FakeControlPlane, start_agent: StartAgent, script: str, signum: int
) -> None:
    plane.assign("a1", argv=["sh", "-c", script], stop_grace_s=1)
    start_agent()
    plane.wait_for(lambda: bool(plane.reports("a1", "started")))
    pgid = plane.reports("a1", "started")[0]["pid"]

    plane.release("a1")
    plane.wait_for(lambda: plane.ended("a1"))

    (exited,) = plane.reports("a1", "exited")
    assert (exited["exit_code"], exited["signal"]) == (None, signum)
    plane.wait_for(lambda: group_gone(pgid), timeout=3)


def test_a_killed_agent_finds_its_run_again_and_reports_it_once(
    plane: FakeControlPlane, start_agent: StartAgent
) -> None:
    plane.assign("a1", argv=["sh", "-c", "echo one; sleep 2; echo two; exit 5"])
    first = start_agent()
    plane.wait_for(lambda: bool(plane.reports("a1", "started")))

    first.signal(signal.SIGKILL)
    second = start_agent()
    plane.wait_for(lambda: plane.ended("a1"))

    assert [r["kind"] for r in plane.reports("a1")] == ["started", "exited"]
    assert [r["kind"] for r in plane.received if r["kind"] == "started"] == ["started"]
    assert plane.reports("a1", "exited")[0]["exit_code"] == 5
    assert plane.output("a1") == b"one\ntwo\n"
    assert "launched a1" not in second.log()


def test_a_stopped_agent_leaves_its_run_running(
    plane: FakeControlPlane, start_agent: StartAgent
) -> None:
    plane.assign("a1", argv=["sh", "-c", "sleep 1.5; echo finished"])
    first = start_agent()
    plane.wait_for(lambda: bool(plane.reports("a1", "started")))
    pid = plane.reports("a1", "started")[0]["pid"]

    assert first.signal(signal.SIGTERM) == 0
    assert not group_gone(pid)
    start_agent()
    plane.wait_for(lambda: plane.ended("a1"))

    assert plane.reports("a1", "exited")[0]["exit_code"] == 0
    assert plane.output("a1") == b"finished\n"


def test_an_outage_delays_the_outcome_but_loses_and_repeats_nothing(
    plane: FakeControlPlane, start_agent: StartAgent
) -> None:
    plane.assign("a1", argv=["sh", "-c", "echo before; sleep 1; echo after; exit 4"])
    start_agent()
    plane.wait_for(lambda: bool(plane.reports("a1", "started")))

    plane.failing = True  # 503s ...
    time.sleep(0.8)
    plane.stop()  # ... then nobody there at all
    time.sleep(1.5)
    back = time.time()
    plane.failing = False
    plane.start()
    plane.wait_for(lambda: plane.ended("a1"))

    assert [(r["kind"], r["seq"]) for r in plane.reports("a1")] == [("started", 1), ("exited", 2)]
    exited = plane.reports("a1", "exited")[0]
    assert exited["exit_code"] == 4
    ended_at = calendar.timegm(time.strptime(exited["at"][:19], "%Y-%m-%dT%H:%M:%S"))
    assert ended_at < back  # the run went on, and ended, while the control plane was away
    assert plane.output("a1") == b"before\nafter\n"
    assert 503 in plane.statuses


def test_a_refused_token_starts_nothing_new_but_keeps_what_runs(
    plane: FakeControlPlane, start_agent: StartAgent
) -> None:
    plane.assign("a1", argv=["sh", "-c", "sleep 1.5; echo kept"])
    agent = start_agent()
    plane.wait_for(lambda: bool(plane.reports("a1", "started")))

    plane.token = "rotated-token"  # the old one is revoked: 401 from now on
    plane.wait_for(lambda: 401 in plane.statuses)
    plane.assign("a2", argv=["sh", "-c", "echo second"])
    time.sleep(2.5)

    assert not (agent.state_dir / "runs" / "a2").exists()
    assert plane.reports("a2") == []
    agent.token_file.write_text("rotated-token\n")
    plane.wait_for(lambda: plane.ended("a1") and plane.ended("a2"))

    assert plane.output("a1") == b"kept\n"
    assert plane.reports("a1", "exited")[0]["exit_code"] == 0
    assert [r["kind"] for r in plane.reports("a2")] == ["started", "exited"]
    assert "refused the node token" in agent.log()


def test_a_command_that_is_not_there_is_start_failed(
    plane: FakeControlPlane, start_agent: StartAgent
) -> None:
    plane.assign("a1", argv=["no-such-command-neocloud"])

    start_agent()
    plane.wait_for(lambda: plane.ended("a1"))

    (failed,) = plane.reports("a1")
    assert failed["kind"] == "start_failed"
    assert failed["message"] == "command not found: no-such-command-neocloud"


def test_a_start_the_agent_died_in_is_reported_failed_not_started_again(
    plane: FakeControlPlane, start_agent: StartAgent, tmp_path: Path
) -> None:
    plane.assign("a1", argv=["sh", "-c", "echo must-not-run"])
    State(AgentProcess(plane, tmp_path).state_dir).save(
        RunRecord(assignment_id="a1", runtime="process", phase=STARTING)
    )

    start_agent()
    plane.wait_for(lambda: plane.ended("a1"))

    (failed,) = plane.reports("a1")
    assert (failed["kind"], failed["message"]) == ("start_failed", "agent died while starting")
    assert plane.output("a1") == b""


def test_stops_come_before_starts_on_the_same_gpus(
    plane: FakeControlPlane, start_agent: StartAgent
) -> None:
    gpus = [{"index": 0, "uuid": "GPU-a"}]
    plane.assign(
        "a1", argv=["sh", "-c", "trap 'sleep 0.5; exit 0' TERM; sleep 30 & wait"], gpus=gpus
    )
    start_agent()
    plane.wait_for(lambda: bool(plane.reports("a1", "started")))

    plane.release("a1")
    plane.assign("a2", argv=["true"], gpus=gpus)  # preempts a1 on GPU 0
    plane.wait_for(lambda: plane.ended("a2"))

    stopped_at = plane.reports("a1", "exited")[0]["at"]
    assert stopped_at <= plane.reports("a2", "started")[0]["at"]
