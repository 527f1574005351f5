"""Preemption with notice, and resume (issue 32), with every part real: gunicorn, a celery
worker, ``neocloud-agent`` running the runs under their own uids. A run NeoCloud stops for its
own reasons gets SIGTERM and ``.neocloud/notice.json`` ``PREEMPTION_NOTICE_S`` before its
kill; preempted work is requeued and its next run is told it resumes.

The checkpoint is kept in a directory every run uid may write, handed to the job in a
variable: a test device only, standing in for a volume (issue 32's volumes share) until both
are merged."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.celery_worker import wait_until
from tests.e2e.conftest import Site
from tests.e2e.test_agent_runs import _running_assignment
from tests.paths import searchable

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

MakeSite = Callable[..., Site]
NOTICE = {"PREEMPTION_NOTICE_S": 6}

# On SIGTERM: keep the notice and a checkpoint (step 41); resumed: say what it found, and end.
CHECKPOINTING = """
umask 022
if [ "$NEOCLOUD_RESUMED" = 1 ]; then
  echo "resumed after $NEOCLOUD_RESTARTS run(s) from step $(cat "$CHECKPOINTS/step")"
  exit 0
fi
echo "first run, restarts $NEOCLOUD_RESTARTS"
save() { cp .neocloud/notice.json "$CHECKPOINTS/notice.json"; echo 41 > "$CHECKPOINTS/step"; }
trap 'save; exit 0' TERM
while true; do sleep 0.2; done
"""


def _checkpoints(tmp_path: Path) -> Path:
    """A directory every run uid may write (sticky, like /tmp)."""
    path = tmp_path / "checkpoints"
    path.mkdir()
    path.chmod(0o1777)
    searchable(path)
    return path


def _said(site: Site, workload_id: str) -> list[str]:
    """The workload's output lines, less the shell's word for its sleep killed by SIGTERM."""
    text, _ = site.logs(workload_id)
    return [line for line in text.splitlines() if line != "Terminated"]


def _notices(site: Site, workload_id: str) -> list[dict[str, Any]]:
    events = site.client.get(f"/api/v1/workloads/{workload_id}/events").json()
    return [e for e in events if e["type"] == "scheduler.RunNoticeGiven"]


def test_a_preempted_job_checkpoints_on_its_notice_and_resumes_from_it(
    site: MakeSite, tmp_path: Path
) -> None:
    # given a low-priority job holding the node's GPUs, which checkpoints on SIGTERM
    here = site(nodes=1, gpus=2, settings=NOTICE)
    here.agent(here.nodes[0])
    checkpoints = _checkpoints(tmp_path)
    low = here.submit(
        "trainer",
        ["sh", "-c", CHECKPOINTING],
        gpus_per_node=2,
        priority_class="low",
        env={"CHECKPOINTS": str(checkpoints)},
    )
    (first,) = _running_assignment(here, low["id"])
    # when production work needs the GPUs
    prod = here.submit(
        "urgent", ["sh", "-c", "echo urgent"], gpus_per_node=2, priority_class="production"
    )
    # then the job gets its notice, saves its checkpoint and ends by itself, before any kill
    done = here.wait_status(low["id"], "succeeded", "failed", timeout=90)
    assert done["status"] == "succeeded", done
    assert here.wait_status(prod["id"], "succeeded", "failed")["status"] == "succeeded"
    notice = json.loads((checkpoints / "notice.json").read_text())
    assert notice["reason"] == "preempted"
    ended = next(a for a in here.assignments(low["id"]) if a["id"] == first["id"])
    assert (ended["exit_code"], ended["signal"]) == (0, None)  # it ended on its notice
    # and its next run was told it resumes, and found its checkpoint
    assert _said(here, low["id"]) == [
        "first run, restarts 0",
        "resumed after 1 run(s) from step 41",
    ]
    assert done["preemptions"] == 1
    # and the notice is in the workload's events, with the deadline the run was given
    (given,) = _notices(here, low["id"])
    assert given["data"]["reason"] == "preempted"
    assert given["data"]["allocation_id"] == first["allocation_id"]
    assert datetime.fromisoformat(given["data"]["deadline"]) == datetime.fromisoformat(
        notice["deadline"]
    )


def test_a_run_reaching_its_max_runtime_is_told_notice_s_before_and_ends_on_time(
    site: MakeSite,
) -> None:
    here = site(nodes=1, gpus=2, settings=NOTICE)
    here.agent(here.nodes[0])
    job = here.submit(
        "bounded",
        [
            "sh",
            "-c",
            "trap 'echo noticed; cat .neocloud/notice.json; exit 0' TERM;"
            " while true; do sleep 0.2; done",
        ],
        max_runtime_s=10,
        retry_limit=0,
    )
    done = here.wait_status(job["id"], "succeeded", "failed", timeout=60)
    lines = _said(here, job["id"])
    assert lines[0] == "noticed"
    notice = json.loads(lines[1])
    (given,) = _notices(here, job["id"])
    (assignment,) = here.assignments(job["id"])
    started = datetime.fromisoformat(assignment["started_at"])
    deadline = datetime.fromisoformat(given["data"]["deadline"])
    # The deadline is the run's maximum, from when NeoCloud marked it running.
    running = next(
        e
        for e in here.client.get(f"/api/v1/workloads/{job['id']}/events").json()
        if e["type"] == "scheduler.WorkloadRunning"
    )
    assert deadline == datetime.fromisoformat(running["data"]["started_at"]) + timedelta(seconds=10)
    assert (notice["reason"], datetime.fromisoformat(notice["deadline"])) == (
        "max_runtime",
        deadline,
    )
    assert given["data"]["notice_s"] == 6
    assert started < deadline
    # It ended by itself on its notice, with its exit code: 0, so it succeeded.
    assert (assignment["exit_code"], assignment["signal"]) == (0, None)
    assert done["status"] == "succeeded"


def test_a_run_ignoring_its_notice_is_killed_at_the_deadline(site: MakeSite) -> None:
    here = site(nodes=1, gpus=2, settings=NOTICE)
    here.agent(here.nodes[0])
    job = here.submit(
        "stubborn",
        [
            "sh",
            "-c",
            "trap '' TERM; while [ ! -f .neocloud/notice.json ]; do sleep 0.2; done;"
            " echo saw the notice; sleep 600 & wait",
        ],
        max_runtime_s=10,
        retry_limit=0,
    )
    done = here.wait_status(job["id"], "succeeded", "failed", timeout=60)
    wait_until(
        lambda: here.assignments(job["id"])[0]["state"] == "exited",
        timeout=30,
        what=f"the agent to report the kill; {here.why()}",
    )
    (assignment,) = here.assignments(job["id"])
    assert assignment["signal"] == 9  # SIGTERM ignored: killed at the notice's end
    text, _ = here.logs(job["id"])
    assert text.splitlines() == ["saw the notice"]
    assert done["status"] == "failed"
    assert "max" in done["status_reason"] or "on notice" in done["status_reason"], done
    (given,) = _notices(here, job["id"])
    assert given["data"]["reason"] == "max_runtime"
