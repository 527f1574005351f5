"""``POST /api/v1/workloads?dry_run=true``: the checks of a submission, then the engine's say
on the cluster as it is, and nothing written. Its reason is the one a real submission then
shows as ``pending_reason``; its refusals are a submission's, byte for byte."""

from __future__ import annotations

from typing import Any

import pytest

from events import store
from neocloud.models import IdempotencyRecord
from scheduler import services
from scheduler.models import Workload, WorkloadWait
from tenants import services as tenant_services
from tenants.models import Role
from tests.builders import Builder, client_with_key, run
from tests.builders.commerce import gpu_model
from tests.scheduler.conftest import Tenant, job, ready_fleet

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

DRY_RUN = "/api/v1/workloads?dry_run=true"


def _client(build: Builder, tenant: Tenant, role: str = Role.OWNER) -> Any:
    membership = build.member(tenant.organization, role)
    _, secret = build.key(tenant.organization, membership.user)
    return client_with_key(secret)


def _body(tenant: Tenant, **fields: Any) -> dict[str, Any]:
    return {"project": str(tenant.project.pk), "name": "probe", "gpu_models": ["h100"], **fields}


def _busy(tenant: Tenant, *gpus: int, **fields: Any) -> None:
    """Running work of ``gpus`` GPUs each, for long enough."""
    for i, count in enumerate(gpus):
        workload = run(
            services.workload_submit,
            project=tenant.project,
            spec=job(f"busy{i}", gpus=count, runtime_estimate_s=600, **fields),
        )
        assert Workload.objects.get(pk=workload.pk).status == "running"


def test_a_job_that_fits_could_run_now_there_and_nothing_is_written(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    fleet = ready_fleet(nodes=2, gpus=8)
    client = _client(build, tenant)
    head = store.head_position()

    response = client.post(
        DRY_RUN, _body(tenant, gpus_per_node=4), format="json", HTTP_IDEMPOTENCY_KEY="k1"
    )

    assert response.status_code == 200, response.json()
    answer = response.json()
    assert (answer["could_run_now"], answer["reason"]) == (True, None)
    assert (answer["gpu_model"], answer["preempts"]) == ("h100", 0)
    (placement,) = answer["placement"]
    assert placement["node_id"] in {str(n.pk) for n in fleet.nodes}
    assert placement["node"] in {n.name for n in fleet.nodes}
    assert len(set(placement["gpus"])) == len(placement["gpus"]) == 4
    assert store.head_position() == head
    assert not Workload.objects.exists()
    assert not IdempotencyRecord.objects.exists()
    # The key was not used up: the real submission with it runs, and is not a replay.
    real = client.post(
        "/api/v1/workloads",
        _body(tenant, gpus_per_node=4),
        format="json",
        HTTP_IDEMPOTENCY_KEY="k1",
    )
    assert real.status_code == 201
    assert "Idempotent-Replayed" not in real
    assert client.get(f"/api/v1/workloads/{real.json()['id']}").json()["status"] == "running"


def test_a_job_that_would_preempt_could_run_now_and_says_how_many_it_takes_back(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=1, gpus=8)
    _busy(tenant, 4, 4, priority_class="low")
    client = _client(build, tenant)

    answer = client.post(
        DRY_RUN, _body(tenant, gpus_per_node=4, priority_class="production"), format="json"
    ).json()

    assert (answer["could_run_now"], answer["preempts"]) == (True, 1)
    assert Workload.objects.filter(status="running").count() == 2  # none preempted for real


def _quota_of_8(tenant: Tenant) -> None:
    run(
        tenant_services.quota_set,
        organization=tenant.organization,
        project=tenant.project,
        gpu_model="h100",
        max_gpus=8,
    )


# Each: the running work first, then what is asked, and the engine's code for why it waits.
WAITS: dict[str, tuple[tuple[int, ...], dict[str, Any], str]] = {
    "fragmented": ((6, 6), {"gpus_per_node": 4, "topology": "single_node"}, "fragmented"),
    "too-big-now": ((8, 4), {"gpus_per_node": 8}, "insufficient_capacity"),
    "gang": ((6, 6), {"gpus_per_node": 4, "nodes": 2}, "gang"),
    "quota-in-use": ((8,), {"gpus_per_node": 2}, "quota"),
}


@pytest.mark.parametrize("case", list(WAITS), ids=list(WAITS))
def test_a_job_that_cannot_start_now_gets_the_reason_a_submission_then_waits_for(
    case: str, build: Builder, tenant: Tenant, in_process: None
) -> None:
    running, asked, code = WAITS[case]
    ready_fleet(nodes=2, gpus=8)
    if case == "quota-in-use":
        _quota_of_8(tenant)
    _busy(tenant, *running)
    client = _client(build, tenant)
    head = store.head_position()

    dry = client.post(DRY_RUN, _body(tenant, **asked), format="json")

    assert dry.status_code == 200, dry.json()
    answer = dry.json()
    assert (answer["could_run_now"], answer["placement"], answer["gpu_model"]) == (
        False,
        None,
        None,
    )
    assert answer["reason"]["code"] == code, answer["reason"]
    assert store.head_position() == head
    assert Workload.objects.count() == len(running)
    assert not WorkloadWait.objects.exists()
    submitted = client.post("/api/v1/workloads", _body(tenant, **asked), format="json").json()
    shown = client.get(f"/api/v1/workloads/{submitted['id']}").json()
    assert shown["status"] in {"pending", "admitted"}
    assert {k: shown["pending_reason"][k] for k in ("code", "message", "figures")} == answer[
        "reason"
    ]


BAD: dict[str, dict[str, Any]] = {
    "no-gpus": {"gpus_per_node": 0},
    "no-such-model": {"gpu_models": ["tpu"]},
    "a-model-no-node-has": {"gpu_models": ["l4"]},
    "bigger-than-any-node": {"gpus_per_node": 16},
    "over-the-quota": {"gpus_per_node": 12},
    "unknown-priority-class": {"priority_class": "vip"},
    "single-node-on-two": {"topology": "single_node", "nodes": 2},
    "a-string-for-a-number": {"gpus_per_node": "4"},
    "no-name": {"name": ""},
}


def test_bad_input_is_refused_as_a_submission_refuses_it_and_nothing_is_written(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=2, gpus=8)
    gpu_model("l4", shareable=True)  # a model of the catalog that no node has
    _quota_of_8(tenant)
    client = _client(build, tenant)
    head = store.head_position()
    for case, fields in BAD.items():
        dry = client.post(DRY_RUN, _body(tenant, **fields), format="json")
        real = client.post("/api/v1/workloads", _body(tenant, **fields), format="json")
        assert dry.status_code == real.status_code == 400, (case, dry.json())
        assert dry.json() == real.json(), case
    assert store.head_position() == head
    assert not Workload.objects.exists()


def test_a_bad_dry_run_value_is_a_400_on_that_parameter(build: Builder, tenant: Tenant) -> None:
    ready_fleet(nodes=1)
    response = _client(build, tenant).post(
        "/api/v1/workloads?dry_run=perhaps", _body(tenant), format="json"
    )
    assert response.status_code == 400
    assert "dry_run" in response.json()["error"]["fields"]
    assert not Workload.objects.exists()


def test_a_misspelt_dry_run_is_refused_not_submitted_for_real(
    build: Builder, tenant: Tenant
) -> None:
    """Dropped, ``?dry_runn=true`` would queue real, billed work."""
    ready_fleet(nodes=1)
    client = _client(build, tenant)
    head = store.head_position()

    response = client.post("/api/v1/workloads?dry_runn=true", _body(tenant), format="json")

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unknown_field"
    assert response.json()["error"]["fields"] == {
        "dry_runn": ["Unknown field. Did you mean dry_run?"]
    }
    assert store.head_position() == head
    assert not Workload.objects.exists()


def test_the_project_is_the_callers_and_viewers_cannot_dry_run(
    build: Builder, tenant: Tenant
) -> None:
    ready_fleet(nodes=1)
    stranger = Tenant(build.organization("Globex"), None)  # type: ignore[arg-type]
    outsider = _client(build, stranger)
    theirs = outsider.post(DRY_RUN, _body(tenant), format="json")
    assert theirs.status_code == 400
    assert list(theirs.json()["error"]["fields"]) == ["project"]
    assert theirs.json() == outsider.post("/api/v1/workloads", _body(tenant), format="json").json()
    viewer = _client(build, tenant, Role.VIEWER)
    assert viewer.post(DRY_RUN, _body(tenant), format="json").status_code == 403
    assert _client(build, tenant).post(DRY_RUN, _body(tenant), format="json").status_code == 200


def test_estimates_and_dry_runs_are_bounded_per_organization(
    build: Builder, tenant: Tenant, in_process: None, settings: Any
) -> None:
    settings.FORECASTS_PER_MINUTE_PER_ORGANIZATION = 2
    ready_fleet(nodes=1, gpus=8)
    client = _client(build, tenant)
    other = build.organization("Initech")
    other_client = _client(build, Tenant(other, build.project(other, "Research")))

    dry = client.post(DRY_RUN, _body(tenant), format="json")
    estimate = client.post("/api/v1/workloads/estimate", _body(tenant), format="json")
    third = client.post(DRY_RUN, _body(tenant), format="json")
    elsewhere = other_client.post(
        DRY_RUN,
        {"project": str(other.project_set.get().pk), "name": "p", "gpu_models": ["h100"]},
        format="json",
    )

    assert (dry.status_code, estimate.status_code) == (200, 200), estimate.json()
    assert third.status_code == 429, third.json()
    assert third.json()["error"]["code"] == "throttled"
    assert third.json()["error"]["details"] == {"limit_per_minute": 2, "retry_after_s": 60}
    assert elsewhere.status_code == 200, elsewhere.json()  # another organization's own count
