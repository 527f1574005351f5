"""A job submitted through the API runs as a real process under a real agent, on exactly its
GPUs; its logs and exit code come back; stops, agent crashes, control-plane outages, gangs,
revoked tokens and secrets behave as issue 13 says. Every process is real: gunicorn, a celery
worker, ``neocloud-agent`` with fake GPUs, the runs themselves."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import Counter
from collections.abc import Callable

import pytest
from django.db import connection

from inventory import services as inventory
from scheduler.models import Allocation
from tests.builders import run
from tests.celery_worker import wait_until
from tests.e2e.conftest import Site
from tests.live import run_processes

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

MakeSite = Callable[..., Site]


def _reports(assignment_id: str) -> Counter[str]:
    """How many reports of each kind the log holds for the assignment."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT data FROM events_event WHERE stream_id = %s AND type LIKE %s",
            [assignment_id, "execution.%Report%"],
        )
        kinds = [json.loads(d)["kind"] if isinstance(d, str) else d["kind"] for (d,) in cursor]
    return Counter(kinds)


def _running_assignment(site: Site, workload_id: str, count: int = 1) -> list[dict[str, object]]:
    found: list[dict[str, object]] = []

    def started() -> bool:
        found[:] = [a for a in site.assignments(workload_id) if a["state"] == "running"]
        return len(found) == count

    wait_until(started, timeout=60, what=f"{count} running assignment(s); {site.why()}")
    return found


def test_a_job_runs_on_exactly_its_gpus_and_its_logs_and_exit_code_come_back(
    site: MakeSite,
) -> None:
    here = site(nodes=1, gpus=4)
    here.agent(here.nodes[0])
    lines = "i=0; while [ $i -lt 300 ]; do echo line-$i; i=$((i+1)); done"
    job = here.submit(
        "hello",
        ["sh", "-c", f'echo "cvd=$CUDA_VISIBLE_DEVICES"; {lines}; echo oops >&2; exit 0'],
        gpus_per_node=2,
    )
    done = here.wait_status(job["id"], "succeeded", "failed")
    assert done["status"] == "succeeded", done
    (allocation,) = Allocation.objects.filter(workload_id=job["id"])  # what the engine chose
    gpus = allocation.placements[0]["gpus"]
    assert [g["index"] for g in here.assignments(job["id"])[0]["gpus"]] == gpus
    text, last = here.logs(job["id"])
    assert text.splitlines() == [
        f"cvd={','.join(str(g) for g in gpus)}",
        *(f"line-{i}" for i in range(300)),
        "oops",
    ]
    assert last["complete"] is True

    failing = here.submit("fails", ["sh", "-c", "echo bye; exit 3"], retry_limit=0)
    failed = here.wait_status(failing["id"], "succeeded", "failed")
    assert failed["status"] == "failed"
    assert "exit code 3" in failed["status_reason"]
    (assignment,) = here.assignments(failing["id"])
    assert assignment["exit_code"] == 3


def test_a_cancel_leaves_no_process_of_the_run_alive(site: MakeSite) -> None:
    here = site(nodes=1, gpus=2)
    here.agent(here.nodes[0])
    # Ignores SIGTERM and has a child: only the group's SIGKILL after the grace ends it.
    job = here.submit("stubborn", ["sh", "-c", "trap '' TERM; sleep 600 & sleep 600; wait"])
    (assignment,) = _running_assignment(here, job["id"])
    wait_until(
        lambda: len(run_processes(str(assignment["id"]))) >= 2,
        timeout=10,
        what="the run and its child",
    )
    response = here.client.post(f"/api/v1/workloads/{job['id']}/cancel", {}, format="json")
    assert response.status_code == 200, response.json()
    wait_until(
        lambda: not run_processes(str(assignment["id"])),
        timeout=30,
        what=f"every process of the run gone; {here.why()}",
    )
    wait_until(
        lambda: here.assignments(job["id"])[0]["state"] == "exited",
        timeout=20,
        what="the agent to report the stop",
    )
    stopped = here.assignments(job["id"])[0]
    assert stopped["signal"] == 9  # SIGTERM was ignored: the group was killed after the grace
    assert here.workload(job["id"])["status"] == "cancelled"


def test_a_preempted_run_leaves_no_process_alive_and_the_preemptor_runs(site: MakeSite) -> None:
    here = site(nodes=1, gpus=2)
    here.agent(here.nodes[0])
    low = here.submit(
        "experiment",
        ["sh", "-c", "sleep 600 & sleep 600; wait"],
        gpus_per_node=2,
        priority_class="low",
    )
    (victim,) = _running_assignment(here, low["id"])
    prod = here.submit(
        "urgent", ["sh", "-c", "echo urgent"], gpus_per_node=2, priority_class="production"
    )
    wait_until(
        lambda: not run_processes(str(victim["id"])),
        timeout=30,
        what=f"every process of the preempted run gone; {here.why()}",
    )
    done = here.wait_status(prod["id"], "succeeded", "failed")
    assert done["status"] == "succeeded", done
    assert here.workload(low["id"])["preemptions"] >= 1
    here.client.post(f"/api/v1/workloads/{low['id']}/cancel", {}, format="json")


def test_an_agent_killed_mid_run_finds_its_run_again_and_reports_it_once(site: MakeSite) -> None:
    here = site(nodes=1, gpus=2)
    agent = here.agent(here.nodes[0])
    job = here.submit("survivor", ["sh", "-c", "echo start; sleep 4; echo end; exit 0"])
    (assignment,) = _running_assignment(here, job["id"])
    agent.kill()
    assert run_processes(str(assignment["id"]))  # the run outlives its agent
    time.sleep(1)
    here.agent(here.nodes[0])  # the same state directory
    done = here.wait_status(job["id"], "succeeded", "failed")
    assert done["status"] == "succeeded", done
    text, _ = here.logs(job["id"])
    assert text.splitlines() == ["start", "end"]  # started once, output whole and once
    reports = _reports(str(assignment["id"]))
    assert reports["started"] == 1
    assert reports["exited"] == 1


def test_the_run_goes_on_while_the_control_plane_is_down_and_reports_once_it_is_back(
    site: MakeSite,
) -> None:
    here = site(nodes=1, gpus=2)
    here.agent(here.nodes[0])
    job = here.submit(
        "outage", ["sh", "-c", "echo before; sleep 4; echo after; exit 4"], retry_limit=0
    )
    (assignment,) = _running_assignment(here, job["id"])
    here.control_plane.kill()
    wait_until(
        lambda: not run_processes(str(assignment["id"])),
        timeout=30,
        what="the run to end while the control plane is down",
    )
    time.sleep(1)
    here.control_plane.start()
    done = here.wait_status(job["id"], "succeeded", "failed")
    assert done["status"] == "failed"
    assert "exit code 4" in done["status_reason"]
    text, _ = here.logs(job["id"])
    assert text.splitlines() == ["before", "after"]
    reports = _reports(str(assignment["id"]))
    assert reports["started"] == 1
    assert reports["exited"] == 1


RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK", "LOCAL_WORLD_SIZE")


def test_a_gang_over_two_agents_gets_consistent_rendezvous_variables_and_starts_together(
    site: MakeSite,
) -> None:
    here = site(nodes=2, gpus=2)
    for node in here.nodes:
        here.agent(node)
    show = " ".join(f"{name}=${name}" for name in RENDEZVOUS)
    job = here.submit("gang", ["sh", "-c", f'echo "{show}"; sleep 1'], nodes=2, gpus_per_node=2)
    done = here.wait_status(job["id"], "succeeded", "failed")
    assert done["status"] == "succeeded", done
    page = here.client.get(f"/api/v1/workloads/{job['id']}/logs").json()
    seen = {}
    for entry in page["entries"]:
        values = dict(re.findall(r"(\w+)=(\S*)", entry["text"]))
        seen[entry["rank"]] = values
    assert set(seen) == {0, 1}
    for rank, values in seen.items():
        assert values["NODE_RANK"] == str(rank)
        assert values["WORLD_SIZE"] == "4"
        assert values["LOCAL_WORLD_SIZE"] == "2"
    assert seen[0]["MASTER_ADDR"] == seen[1]["MASTER_ADDR"] != ""
    assert seen[0]["MASTER_PORT"] == seen[1]["MASTER_PORT"] != ""
    starts = sorted(a["started_at"] for a in here.assignments(job["id"]))
    assert len(starts) == 2  # both ranks ran


def test_a_revoked_token_is_refused_and_the_agent_takes_no_new_work(site: MakeSite) -> None:
    here = site(nodes=1, gpus=2)
    node = here.nodes[0]
    agent = here.agent(node)
    wait_until(
        lambda: node.__class__.objects.get(pk=node.pk).last_heartbeat_at is not None,
        timeout=20,
        what="a first heartbeat",
    )
    _, new_token = run(inventory.node_token_rotate, node=node)
    job = here.submit("after-revoke", ["sh", "-c", "echo ran"])
    wait_until(
        lambda: bool(here.assignments(job["id"])),
        timeout=30,
        what="the assignment",
    )
    time.sleep(4)  # several polls: each refused
    (assignment,) = here.assignments(job["id"])
    assert assignment["state"] == "assigned"
    assert not run_processes(str(assignment["id"]))
    assert "401" in agent.log() or "unauthor" in agent.log().lower()
    agent.token_file.write_text(new_token)  # the operator installs the new token
    done = here.wait_status(job["id"], "succeeded", "failed")
    assert done["status"] == "succeeded", done


def test_a_secret_value_appears_nowhere_but_in_the_runs_environment(site: MakeSite) -> None:
    here = site(nodes=1, gpus=2)
    agent = here.agent(here.nodes[0])
    value = "s3cr3t-value-7f1c2b9e"
    response = here.client.post(
        "/api/v1/secrets",
        {"project": str(here.project.pk), "name": "HF_TOKEN", "value": value},
        format="json",
    )
    assert response.status_code == 201, response.json()
    job = here.submit(
        "uses-secret",
        ["sh", "-c", 'echo "length=${#HF_TOKEN}"; printf %s "$HF_TOKEN" | sha256sum'],
        secrets=["HF_TOKEN"],
    )
    done = here.wait_status(job["id"], "succeeded", "failed")
    assert done["status"] == "succeeded", done
    text, _ = here.logs(job["id"])
    digest = hashlib.sha256(value.encode()).hexdigest()
    assert text.split() == [f"length={len(value)}", digest, "-"]  # the run had it
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM events_event WHERE data::text LIKE %s", [f"%{value}%"])
        assert cursor.fetchone() == (0,)
    for process in (here.control_plane, here.worker, agent):
        assert value not in process.log()
    for path in agent.state_dir.rglob("*"):
        if path.is_file():
            assert value.encode() not in path.read_bytes(), path
