"""SSH into runs (issue 32), the control plane's side: a run taking SSH is listed to its agent
with the keys of its project's members, the listing's version moves when a key is added or
removed or a member leaves, and the agent's ``ssh`` endpoint becomes the workload's."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from scheduler.models import Workload
from scheduler.specs import WorkloadKind
from tenants import services as tenancy
from tenants.access import Actor
from tenants.models import Membership, Role, User
from tests.builders import Builder, run
from tests.execution.conftest import Agent, Customer, customer_of, submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def public_key(tmp_path: Path, name: str) -> str:
    path = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return Path(f"{path}.pub").read_text()


def add_key(user: User, text: str) -> str:
    key = run(tenancy.ssh_key_add, actor=Actor(user=user), public_key=text)
    return f"{key.public_key} {key.fingerprint}"


def holder(agents: list[Agent]) -> tuple[Agent, dict[str, Any]]:
    (found,) = [(a, listed) for a in agents for listed in a.assignments()["assignments"]]
    return found


def owner_of(customer: Customer) -> User:
    return Membership.objects.get(organization=customer.organization, role=Role.OWNER).user


def test_a_run_taking_ssh_is_listed_with_its_project_members_keys(
    agents: list[Agent], acme: Customer, build: Builder, tmp_path: Path
) -> None:
    owner_line = add_key(owner_of(acme), public_key(tmp_path, "owner"))
    outsider = build.organization("Globex", owner=build.user())
    outsider_user = Membership.objects.get(organization=outsider).user
    add_key(outsider_user, public_key(tmp_path, "outsider"))
    submit(acme, ssh=True)
    submit(acme, name="plain", gpus=8)

    listed = [a for agent in agents for a in agent.assignments()["assignments"]]

    by_name = {a["workload_name"]: a for a in listed}
    assert by_name["train"]["ssh"] == {"authorized_keys": [owner_line]}
    assert "ssh" not in by_name["plain"]


def test_a_key_added_or_removed_or_a_member_gone_changes_the_nodes_desired_state(
    agents: list[Agent], acme: Customer, build: Builder, tmp_path: Path
) -> None:
    member = build.member(acme.organization, Role.MEMBER)
    submit(acme, ssh=True)
    agent, _ = holder(agents)
    before = agent.assignments()["version"]

    line = add_key(member.user, public_key(tmp_path, "member"))
    added = agent.assignments()
    run(tenancy.member_remove, membership=member)
    removed = agent.assignments()

    assert added["version"] != before
    assert added["assignments"][0]["ssh"] == {"authorized_keys": [line]}
    assert removed["version"] == before  # the same desired state as before the key
    assert removed["assignments"][0]["ssh"] == {"authorized_keys": []}
    # Long polling on the version it had, the agent is answered at once.
    assert agent.assignments(since=added["version"], wait=1)["version"] == removed["version"]


def test_the_agents_ssh_endpoint_is_the_workloads_with_the_command_to_log_in(
    agents: list[Agent], acme: Customer
) -> None:
    workload = submit(acme, kind=WorkloadKind.SERVICE, ssh=True)
    agent, assignment = holder(agents)
    agent.report(assignment["id"], "started", pid=1)

    agent.report(
        assignment["id"],
        "ports",
        ports=[{"port": 30007, "address": "10.0.0.5:30007", "kind": "ssh"}],
    )

    assert Workload.objects.get(pk=workload.pk).endpoints == [
        {"port": 30007, "address": "10.0.0.5:30007", "node": agent.node.name, "kind": "ssh"}
    ]
    shown = acme.get(f"workloads/{workload.pk}").json()
    assert shown["ssh"] is True
    assert shown["ssh_commands"] == ["ssh -p 30007 run@10.0.0.5"]


def jump_answer(text: str) -> str:
    key_type, key_base64 = text.split()[:2]
    out = io.StringIO()
    call_command("ssh_authorized_keys", key_type, key_base64, stdout=out)
    return out.getvalue().strip()


def test_the_jump_host_lets_a_key_forward_only_to_the_sshds_of_its_own_runs(
    agents: list[Agent], acme: Customer, build: Builder, tmp_path: Path
) -> None:
    mine = public_key(tmp_path, "mine")
    add_key(owner_of(acme), mine)
    globex = customer_of(build, "Globex")
    theirs = public_key(tmp_path, "theirs")
    add_key(owner_of(globex), theirs)
    unknown = public_key(tmp_path, "unknown")
    submit(acme, kind=WorkloadKind.SERVICE, ssh=True)
    submit(globex, kind=WorkloadKind.SERVICE, ssh=True)
    for index, (agent, assignment) in enumerate(
        (a, listed) for a in agents for listed in a.assignments()["assignments"]
    ):
        agent.report(assignment["id"], "started", pid=1)
        address = f"10.0.0.{index}:3000{index}"
        ports = [{"port": 30000 + index, "address": address, "kind": "ssh"}]
        agent.report(assignment["id"], "ports", ports=ports)
    acme_address = Workload.objects.get(project=acme.project).endpoints[0]["address"]
    globex_address = Workload.objects.get(project=globex.project).endpoints[0]["address"]

    answer = jump_answer(mine)

    assert answer == f'restrict,port-forwarding,permitopen="{acme_address}" ' + " ".join(
        mine.split()[:2]
    )
    assert globex_address not in answer
    assert jump_answer(theirs).startswith(f'restrict,port-forwarding,permitopen="{globex_address}"')
    assert jump_answer(unknown) == ""


def test_a_dev_environment_takes_ssh_keeps_alive_and_is_listed_with_its_idle_stop(
    agents: list[Agent], acme: Customer, settings: Any
) -> None:
    settings.DEV_IDLE_STOP_S = 900
    response = acme.client.post(
        "/api/v1/workloads",
        {"project": str(acme.project.pk), "name": "box", "kind": "dev", "gpu_models": ["h100"]},
        format="json",
    )
    assert response.status_code == 201, response.content
    agent, assignment = holder(agents)

    assert response.json()["ssh"] is True
    assert response.json()["idle_stop_s"] == 900
    assert assignment["argv"] == ["sleep", "infinity"]
    assert assignment["ssh"] == {"authorized_keys": []}
    assert assignment["idle_stop"] == {
        "after_s": 900.0,
        "gpu_below_pct": settings.GPU_IDLE_THRESHOLD_PCT,
    }
    agent.report(assignment["id"], "started", pid=1)
    agent.report(assignment["id"], "exited", exit_code=0, message="idle stop: …")
    assert Workload.objects.get(pk=response.json()["id"]).status == "succeeded"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"kind": "job", "command": ["true"], "idle_stop_s": 60}, "idle_stop_s"),
        ({"kind": "dev", "idle_stop_s": 0}, "idle_stop_s"),
        ({"kind": "dev", "ssh": "yes"}, "ssh"),
    ],
    ids=["idle-stop-on-a-job", "idle-stop-zero", "ssh-not-a-boolean"],
)
def test_bad_dev_and_ssh_fields_are_400_and_nothing_is_submitted(
    agents: list[Agent], acme: Customer, fields: dict[str, Any], field: str
) -> None:
    body = {"project": str(acme.project.pk), "name": "x", "gpu_models": ["h100"], **fields}

    response = acme.client.post("/api/v1/workloads", body, format="json")

    assert response.status_code == 400, response.content
    assert list(response.json()["error"]["fields"]) == [field]
    assert not Workload.objects.exists()
