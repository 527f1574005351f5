"""What a workload runs: carried from the request (directly or against an offering) to its
row, held to its bounds with a 400 naming the field, secrets only of its own project, and old
submissions without a program still replaying."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from events.models import Event
from inventory import services as inventory
from inventory.models import Cluster, GpuModel
from scheduler.events import WorkloadSubmitted
from scheduler.models import Workload
from scheduler.specs import PROGRAM_FIELDS
from tenants import services as tenancy
from tenants.models import Role
from tests.builders import Builder, client_with_key, run
from tests.builders import commerce as commerce

SUBMITTED = WorkloadSubmitted.event_type
PROGRAM = {
    "command": ["python", "-m", "serve", "--port", "8000", "--port", "8000"],
    "image": "ghcr.io/acme/serve:1.2@sha256:" + "a" * 64,
    "env": {"MODE": "prod", "EMPTY": ""},
    "secrets": ["HF_TOKEN"],
    "working_dir": "/srv/app",
    "ports": [8000, 9090],
}


@pytest.fixture
def world(build: Builder) -> dict[str, Any]:
    commerce.shop()
    owner = build.user()
    organization = build.organization("Acme", owner=owner)
    project = build.project(organization)
    run(tenancy.secret_create, project=project, name="HF_TOKEN", value="hf_x")
    other = build.organization("Initech", owner=build.user())
    other_project = build.project(other)
    run(tenancy.secret_create, project=other_project, name="THEIRS", value="v")
    return {"project": project, "key": build.key(organization, owner)[1]}


def submit(world: dict[str, Any], **fields: Any) -> Any:
    body = {"project": str(world["project"].pk), "name": "svc", "gpu_models": ["h100"]}
    body |= {"kind": "service", "restart_policy": "on_failure", **fields}
    return client_with_key(world["key"]).post("/api/v1/workloads", body, format="json")


@pytest.mark.django_db
def test_the_program_reaches_the_workload(world: dict[str, Any]) -> None:
    response = submit(world, **PROGRAM)

    assert response.status_code == 201, response.content
    shown = response.json()
    assert {k: shown[k] for k in PROGRAM} == PROGRAM
    assert shown["endpoints"] == []
    row = Workload.objects.get(pk=shown["id"])
    assert row.command == PROGRAM["command"]
    assert row.secrets == ["HF_TOKEN"]


@pytest.mark.django_db
def test_an_offering_carries_the_program_through(world: dict[str, Any]) -> None:
    response = client_with_key(world["key"]).post(
        "/api/v1/workloads",
        {
            "project": str(world["project"].pk),
            "name": "inf",
            "offering": "l4-half",
            "region": commerce.REGION,
            **PROGRAM,
        },
        format="json",
    )

    assert response.status_code == 201, response.content
    row = Workload.objects.get(pk=response.json()["id"])
    assert row.offering == "l4-half"
    assert (row.command, row.image, row.env) == (
        PROGRAM["command"],
        PROGRAM["image"],
        PROGRAM["env"],
    )
    assert (row.secrets, row.working_dir, row.ports) == (["HF_TOKEN"], "/srv/app", [8000, 9090])


BAD: dict[str, tuple[dict[str, Any], str]] = {
    "argv-count": ({"command": ["x"] * 257}, "command"),
    "argv-arg-bytes": ({"command": ["x", "é" * 2049]}, "command"),
    "argv-total-bytes": ({"command": ["y" * 4000] * 9}, "command"),
    "argv-not-strings": ({"command": ["python", 3]}, "command"),
    "argv-a-string": ({"command": "python serve.py"}, "command"),
    "argv-empty-program": ({"command": [""]}, "command"),
    "env-count": ({"env": {f"V{i}": "x" for i in range(129)}}, "env"),
    "env-value-size": ({"env": {"BIG": "x" * 4097}}, "env"),
    "env-value-bytes": ({"env": {"BIG": "é" * 2049}}, "env"),
    "env-name-digit": ({"env": {"1X": "v"}}, "env"),
    "env-name-dash": ({"env": {"MY-VAR": "v"}}, "env"),
    "env-name-reserved": ({"env": {"NEOCLOUD_NODE": "v"}}, "env"),
    "env-value-number": ({"env": {"N": 1}}, "env"),
    "image-uppercase": ({"image": "Acme/Serve"}, "image"),
    "image-space": ({"image": "acme serve"}, "image"),
    "image-bad-digest": ({"image": "acme@sha256:123"}, "image"),
    "image-empty-tag": ({"image": "acme:"}, "image"),
    "image-long-name": ({"image": "a" * 256}, "image"),
    "working-dir-relative": ({"working_dir": "srv/app"}, "working_dir"),
    "ports-zero": ({"ports": [0]}, "ports"),
    "ports-too-high": ({"ports": [65536]}, "ports"),
    "ports-twice": ({"ports": [80, 80]}, "ports"),
    "ports-of-a-job": ({"ports": [80], "kind": "job", "restart_policy": "never"}, "ports"),
    "secrets-unknown": ({"secrets": ["NOPE"]}, "secrets"),
    "secrets-of-another-organization": ({"secrets": ["THEIRS"]}, "secrets"),
    "secrets-twice": ({"secrets": ["HF_TOKEN", "HF_TOKEN"]}, "secrets"),
    "secrets-bad-name": ({"secrets": ["bad-name"]}, "secrets"),
    "secrets-reserved": ({"secrets": ["NEOCLOUD_X"]}, "secrets"),
    "secrets-also-env": ({"secrets": ["HF_TOKEN"], "env": {"HF_TOKEN": "x"}}, "secrets"),
}


@pytest.mark.django_db
@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_programs_are_refused(world: dict[str, Any], case: str) -> None:
    fields, field = BAD[case]
    events = Event.objects.count()

    response = submit(world, **fields)

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert list(error["fields"]) == [field]
    assert Event.objects.count() == events


@pytest.mark.django_db
def test_a_member_may_refer_to_a_secret_by_name_but_not_read_it(
    build: Builder, world: dict[str, Any]
) -> None:
    member = build.member(world["project"].organization, Role.MEMBER).user
    world = {**world, "key": build.key(world["project"].organization, member)[1]}

    response = submit(world, secrets=["HF_TOKEN"])

    assert response.status_code == 201, response.content
    assert "hf_x" not in response.content.decode()
    assert client_with_key(world["key"]).get("/api/v1/secrets").json()["results"] == []


@pytest.mark.django_db
def test_a_submission_recorded_before_programs_still_replays(world: dict[str, Any]) -> None:
    response = submit(world, **PROGRAM)
    assert response.status_code == 201
    recorded = Event.objects.get(stream_id=response.json()["id"], type=SUBMITTED)
    old = {k: v for k, v in recorded.data.items() if k not in PROGRAM_FIELDS}
    old_id = uuid.uuid4()
    old["workload_id"] = str(old_id)
    with connection.cursor() as cursor:  # as it was written before workloads ran anything
        cursor.execute(
            "INSERT INTO events_event (stream_type, stream_id, version, type, schema_version,"
            " data, metadata, recorded_at) VALUES ('workload', %s, 1, %s, 1, %s, '{}', %s)",
            [
                str(old_id),
                SUBMITTED,
                json.dumps(old),
                connection.ops.adapt_datetimefield_value(timezone.now()),
            ],
        )

    call_command("replay", "scheduler.scheduling", verbosity=0)

    row = Workload.objects.get(pk=old_id)
    assert (row.command, row.image, row.env, row.secrets, row.working_dir, row.ports) == (
        [],
        "",
        {},
        [],
        "",
        [],
    )
    assert row.endpoints == []
    assert Workload.objects.get(pk=response.json()["id"]).command == PROGRAM["command"]


WITHOUT_A_COMMAND = {  # every path a submission takes: each is refused the same way
    "submit": ("/api/v1/workloads", {}),
    "dry-run": ("/api/v1/workloads?dry_run=true", {}),
    "array": ("/api/v1/workloads/batch", {"array": {"count": 3}}),
}


def job_without_a_command(world: dict[str, Any], path: str, **fields: Any) -> Any:
    body = {"project": str(world["project"].pk), "name": "train", "gpu_models": ["h100"]}
    return client_with_key(world["key"]).post(path, {**body, **fields}, format="json")


@pytest.mark.django_db
@pytest.mark.parametrize("case", list(WITHOUT_A_COMMAND), ids=list(WITHOUT_A_COMMAND))
def test_no_command_nor_image_is_refused_where_agents_run_the_work(
    world: dict[str, Any], settings: Any, case: str
) -> None:
    settings.PROVISIONING_DRIVER = "agent"  # every node's runs are its agent's
    path, fields = WITHOUT_A_COMMAND[case]
    events, rows = Event.objects.count(), Workload.objects.count()

    response = job_without_a_command(world, path, **fields)

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert (error["code"], error["fields"]) == ("invalid", {"command": ["required"]})
    assert (Event.objects.count(), Workload.objects.count()) == (events, rows)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("gpu_models", "status"),
    [(["l4"], 400), (["h100"], 201), ([], 400)],
    ids=["its-model-has-an-agent-node", "only-simulated-nodes", "any-model"],
)
def test_a_node_run_by_its_own_agent_needs_a_command_of_work_it_may_hold(
    world: dict[str, Any], gpu_models: list[str], status: int
) -> None:
    """The demo's fleet: simulated nodes, and one of its own driver, ``agent``."""
    shop = Cluster.objects.get(slug="eu-west-1")
    run(
        inventory.node_register,
        cluster=shop,
        name="l4-agent",
        gpu_model=GpuModel.objects.get(slug="l4"),
        cpu_milli=96_000,
        memory_mib=1_048_576,
        gpus=[inventory.GpuSlot(index=i) for i in range(4)],
        driver="agent",
    )

    response = job_without_a_command(world, "/api/v1/workloads", gpu_models=gpu_models)

    assert response.status_code == status, response.content


@pytest.mark.django_db
def test_an_image_without_a_command_runs_its_entrypoint(
    world: dict[str, Any], settings: Any
) -> None:
    settings.PROVISIONING_DRIVER = "agent"

    response = job_without_a_command(world, "/api/v1/workloads", image="ghcr.io/acme/train:1")

    assert response.status_code == 201, response.content
    assert Workload.objects.get(pk=response.json()["id"]).command == []
