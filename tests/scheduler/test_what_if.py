"""What-if: ``POST /api/v1/workloads/estimate`` (when a spec not submitted would start, per GPU
model, at what price per hour) and ``POST /api/v1/clusters/{id}/what-if`` (what a drain or a
reservation would do to the waiting work's estimates). Neither writes anything."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from billing.services.prices import default_price_set
from events import store
from inventory.lifecycle import NodeState
from inventory.models import Node
from neocloud.models import IdempotencyRecord
from scheduler import services
from scheduler.models import Allocation, Reservation, Workload, WorkloadWait
from tenants.models import Role
from tests.builders import Builder, client_with_key, commerce, run
from tests.builders.commerce import gpu_model
from tests.scheduler.conftest import GpuFleet, Tenant, job, model_node, quota, ready_fleet

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

ESTIMATE = "/api/v1/workloads/estimate"
H100_PRICE, A100_PRICE = 250, 180  # cents per GPU-hour


def _client(build: Builder, tenant: Tenant, role: str = Role.OWNER) -> Any:
    membership = build.member(tenant.organization, role)
    _, secret = build.key(tenant.organization, membership.user)
    return client_with_key(secret)


def _operator(build: Builder) -> Any:
    operator = build.user("ops@neocloud.example", is_staff=True)
    ops = build.organization("Operators", owner=operator)
    return client_with_key(build.key(ops, operator)[1])


def _body(tenant: Tenant, **fields: Any) -> dict[str, Any]:
    return {"project": str(tenant.project.pk), "name": "probe", "gpu_models": ["h100"], **fields}


def _busy(tenant: Tenant, *gpus: int, runtime_s: float = 600, **fields: Any) -> list[Workload]:
    """Running work of ``gpus`` GPUs each, for ``runtime_s`` by its estimate."""
    made = []
    for i, count in enumerate(gpus):
        workload = run(
            services.workload_submit,
            project=tenant.project,
            spec=job(f"busy{i}-{runtime_s:g}", gpus=count, runtime_estimate_s=runtime_s, **fields),
        )
        assert Workload.objects.get(pk=workload.pk).status == "running"
        made.append(workload)
    return made


def _prices() -> None:
    for model, minor in (("h100", H100_PRICE), ("a100", A100_PRICE)):
        run(default_price_set, gpu_model=model, price_per_gpu_hour_minor=minor, currency="USD")


def _counts() -> tuple[int, ...]:
    return (
        store.head_position(),
        Workload.objects.count(),
        WorkloadWait.objects.count(),
        Allocation.objects.count(),
        Reservation.objects.count(),
        IdempotencyRecord.objects.count(),
    )


def _at(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def test_the_estimate_answers_per_model_soonest_first_with_its_price_and_writes_nothing(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    fleet = ready_fleet(nodes=1, gpus=8)
    model_node(fleet, "a100", gpus=4)
    _prices()
    _busy(tenant, 8)  # every H100 busy for 10 min by its estimate
    client = _client(build, tenant)
    before = _counts()

    response = client.post(
        ESTIMATE, _body(tenant, gpu_models=["h100", "a100"], gpus_per_node=4), format="json"
    )

    assert response.status_code == 200, response.json()
    answer = response.json()
    a100, h100 = answer["estimates"]
    assert (a100["gpu_model"], a100["starts_now"], a100["never"]) == ("a100", True, None)
    assert a100["basis"] == ["now"]
    assert (a100["cluster"], a100["region"], a100["gpus"]) == ("fra1", "eu", 4.0)
    assert (a100["price_plan"], a100["currency"]) == ("on_demand", "USD")
    assert (a100["price_per_gpu_hour_minor"], a100["price_per_hour_minor"]) == (
        A100_PRICE,
        4 * A100_PRICE,
    )
    assert (h100["gpu_model"], h100["starts_now"], h100["never"]) == ("h100", False, None)
    assert h100["price_per_hour_minor"] == 4 * H100_PRICE
    start, earliest, latest = (_at(h100[k]) for k in ("start", "earliest", "latest"))
    assert start is not None
    assert earliest is not None
    assert latest is not None
    assert earliest <= start <= latest
    assert start > timezone.now()
    # Users' estimates are read as overestimates: the busy work ends after 5 of its 10 min.
    assert 4 * 60 <= h100["wait_s"] <= 11 * 60, h100
    assert "runtime_estimates" in h100["basis"]
    assert answer["summary"].startswith("4 x a100 now, or 4 x h100 in about ")
    assert _counts() == before


def test_with_no_model_named_every_model_of_the_cluster_is_answered(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    fleet = ready_fleet(nodes=1, gpus=8)
    model_node(fleet, "a100", gpus=4)

    answer = (
        _client(build, tenant)
        .post(ESTIMATE, _body(tenant, gpu_models=[], gpus_per_node=2), format="json")
        .json()
    )

    shown = [(e["gpu_model"], e["starts_now"]) for e in answer["estimates"]]
    assert sorted(shown) == [("a100", True), ("h100", True)]
    # No price set: none is quoted rather than a made-up one.
    assert {e["price_per_hour_minor"] for e in answer["estimates"]} == {None}


def test_a_model_that_could_never_hold_it_says_never_and_comes_last(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    fleet = ready_fleet(nodes=1, gpus=8)
    model_node(fleet, "a100", gpus=4)  # too small for 8 GPUs on one node
    gpu_model("l4")  # a model of the catalog that no node has
    _prices()
    client = _client(build, tenant)
    before = _counts()

    response = client.post(
        ESTIMATE,
        _body(tenant, gpu_models=["a100", "l4", "h100"], gpus_per_node=8),
        format="json",
    )

    assert response.status_code == 200, response.json()
    h100, *never = response.json()["estimates"]
    assert (h100["gpu_model"], h100["starts_now"]) == ("h100", True)
    assert {e["gpu_model"] for e in never} == {"a100", "l4"}
    for estimate in never:
        assert estimate["never"], estimate
        assert (estimate["start"], estimate["earliest"], estimate["latest"]) == (None,) * 3
        assert estimate["basis"] == ["never"]
        assert not estimate["starts_now"]
    a100 = next(e for e in never if e["gpu_model"] == "a100")
    assert "largest node: 4 GPUs" in a100["never"]
    assert a100["price_per_hour_minor"] == 8 * A100_PRICE  # what it would cost, were it held
    assert _counts() == before


# Each: the fields asked, and the code and field a submission is refused with.
BAD: dict[str, tuple[dict[str, Any], str, str]] = {
    "no-gpus": ({"gpus_per_node": 0}, "invalid", "gpus_per_node"),
    "no-such-model": ({"gpu_models": ["tpu"]}, "invalid", "gpu_models"),
    "bigger-than-any-node": ({"gpus_per_node": 16}, "unschedulable", "gpus_per_node"),
    "over-the-quota": ({"gpus_per_node": 6, "nodes": 2}, "quota_exceeded", "gpus_per_node"),
    "unknown-priority-class": ({"priority_class": "vip"}, "invalid", "priority_class"),
    "single-node-on-two": ({"topology": "single_node", "nodes": 2}, "invalid", "topology"),
    "a-string-for-a-number": ({"gpus_per_node": "4"}, "invalid", "gpus_per_node"),
    "no-name": ({"name": ""}, "invalid", "name"),
    # Not a field of a workload (``gpus_per_node`` is): was ignored, and answered for 1 GPU.
    "an-unknown-field": ({"gpu_count": 4}, "unknown_field", "gpu_count"),
}


def test_bad_input_is_refused_as_a_submission_refuses_it_with_its_code_and_field(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=2, gpus=8)
    quota(tenant, 8)
    client = _client(build, tenant)
    before = _counts()
    for case, (fields, code, field) in BAD.items():
        estimate = client.post(ESTIMATE, _body(tenant, **fields), format="json")
        real = client.post("/api/v1/workloads", _body(tenant, **fields), format="json")
        assert estimate.status_code == real.status_code == 400, (case, estimate.json())
        assert estimate.json() == real.json(), case
        error = estimate.json()["error"]
        assert (error["code"], list(error["fields"])) == (code, [field]), case
    assert _counts() == before


def test_another_tenants_project_is_refused_and_viewers_cannot_ask(
    build: Builder, tenant: Tenant
) -> None:
    ready_fleet(nodes=1)
    stranger = Tenant(build.organization("Globex"), None)  # type: ignore[arg-type]
    outsider = _client(build, stranger)
    theirs = outsider.post(ESTIMATE, _body(tenant), format="json")
    assert theirs.status_code == 400
    assert theirs.json()["error"]["code"] == "invalid"
    assert list(theirs.json()["error"]["fields"]) == ["project"]
    assert theirs.json() == outsider.post("/api/v1/workloads", _body(tenant), format="json").json()
    assert (
        _client(build, tenant, Role.VIEWER).post(ESTIMATE, _body(tenant), format="json").status_code
        == 403
    )
    assert _client(build, tenant).post(ESTIMATE, _body(tenant), format="json").status_code == 200
    assert client_with_key(None).post(ESTIMATE, _body(tenant), format="json").status_code in {
        401,
        403,
    }


# --- Operators ---------------------------------------------------------------------------------


def _what_if(fleet: GpuFleet) -> str:
    return f"/api/v1/clusters/{fleet.cluster.pk}/what-if"


def _node_of(workload: Workload) -> str:
    (placement,) = Allocation.objects.get(workload=workload, released_at__isnull=True).placements
    return str(placement["node_id"])


def _queue_waiting_for_the_short_node(
    tenant: Tenant,
) -> tuple[GpuFleet, str, str, Workload]:
    """Two busy nodes, one free again soon (the short run's), one late; a job of a whole
    node waits. Its estimate rests on the node that frees first."""
    fleet = ready_fleet(nodes=2, gpus=8)
    (short,) = _busy(tenant, 8, runtime_s=600)
    (long,) = _busy(tenant, 8, runtime_s=6 * 3600)
    waiting = run(services.workload_submit, project=tenant.project, spec=job("next", gpus=8))
    assert Workload.objects.get(pk=waiting.pk).status in {"pending", "admitted"}
    return fleet, _node_of(short), _node_of(long), waiting


def test_draining_the_node_a_queue_waits_for_delays_its_waiting_work_and_writes_nothing(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    fleet, soon, _late, waiting = _queue_waiting_for_the_short_node(tenant)
    client = _operator(build)
    before = _counts()

    response = client.post(_what_if(fleet), {"drain": [soon]}, format="json")

    assert response.status_code == 200, response.json()
    answer = response.json()
    assert (answer["waiting"], answer["delayed"], answer["never_after"]) == (1, 1, 0)
    (change,) = answer["changes"]
    assert change["workload_id"] == str(waiting.pk)
    assert change["name"] == "next"
    was, now = _at(change["before"]["start"]), _at(change["after"]["start"])
    assert was is not None
    assert now is not None
    # Before: when the short run ends (half its 10 min); after: when the long one does.
    assert was - timezone.now() < timedelta(minutes=11)
    assert now - was > timedelta(hours=1)
    assert change["delay_s"] == pytest.approx((now - was).total_seconds())
    assert answer["mean_delay_s"] == answer["max_delay_s"] == change["delay_s"]
    assert _counts() == before
    assert Node.objects.get(pk=soon).state == NodeState.READY  # not drained for real


def test_draining_every_node_it_could_run_on_says_it_could_never_start_after(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    fleet, soon, late, _waiting = _queue_waiting_for_the_short_node(tenant)

    answer = _operator(build).post(_what_if(fleet), {"drain": [soon, late]}, format="json").json()

    assert (answer["never_after"], answer["delayed"]) == (1, 0)
    (change,) = answer["changes"]
    assert change["after"]["basis"] == ["never"]
    assert (change["after"]["start"], change["delay_s"]) == (None, None)


def test_draining_a_node_nothing_waits_for_changes_nothing(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    fleet = ready_fleet(nodes=2, gpus=8)
    (busy,) = _busy(tenant, 8)
    run(services.workload_submit, project=tenant.project, spec=job("next", gpus=8))
    idle = next(str(n.pk) for n in fleet.nodes if str(n.pk) != _node_of(busy))
    # The other node is free: the job starts there, so nothing waits.
    answer = _operator(build).post(_what_if(fleet), {"drain": [idle]}, format="json").json()
    assert (answer["delayed"], answer["changes"]) == (0, [])


def test_a_reservation_of_the_gpus_a_queue_waits_for_delays_it_to_the_window_end(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    fleet = ready_fleet(nodes=1, gpus=8)
    _busy(tenant, 8, runtime_s=600)
    waiting = run(services.workload_submit, project=tenant.project, spec=job("next", gpus=8))
    other = build.project(tenant.organization, "Inference")
    now = timezone.now()
    reservation = {
        "project": str(other.pk),
        "gpu_model": "h100",
        "gpus": 8,
        "starts_at": now.isoformat(),
        "ends_at": (now + timedelta(hours=3)).isoformat(),
    }
    client = _operator(build)
    before = _counts()

    response = client.post(_what_if(fleet), {"reservation": reservation}, format="json")

    assert response.status_code == 200, response.json()
    answer = response.json()
    (change,) = answer["changes"]
    assert change["workload_id"] == str(waiting.pk)
    after = _at(change["after"]["start"])
    assert after is not None
    assert after >= now + timedelta(hours=3) - timedelta(minutes=1)
    assert answer["delayed"] == 1
    assert "reservation" in change["after"]["basis"]
    assert _counts() == before


def test_operator_what_if_refuses_bad_input_with_code_and_field(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    fleet = ready_fleet(nodes=1, gpus=8)
    other = ready_fleet(nodes=1, gpus=8, slug="ams1")
    client = _operator(build)
    now = timezone.now()
    window = {"starts_at": now.isoformat(), "ends_at": (now + timedelta(hours=1)).isoformat()}
    cases: dict[str, tuple[dict[str, Any], str]] = {
        "nothing-asked": ({}, "drain"),
        "not-a-uuid": ({"drain": ["n1"]}, "drain"),
        "a-node-of-another-cluster": ({"drain": [str(other.nodes[0].pk)]}, "drain"),
        "a-model-the-cluster-lacks": (
            {
                "reservation": {
                    "project": str(tenant.project.pk),
                    "gpu_model": "a100",
                    "gpus": 1,
                    **window,
                }
            },
            "reservation",
        ),
        "no-gpus": (
            {
                "reservation": {
                    "project": str(tenant.project.pk),
                    "gpu_model": "h100",
                    "gpus": 0,
                    **window,
                }
            },
            "reservation",
        ),
        "window-backwards": (
            {
                "reservation": {
                    "project": str(tenant.project.pk),
                    "gpu_model": "h100",
                    "gpus": 1,
                    "starts_at": window["ends_at"],
                    "ends_at": window["starts_at"],
                }
            },
            "reservation",
        ),
    }
    for case, (body, field) in cases.items():
        response = client.post(_what_if(fleet), body, format="json")
        assert response.status_code == 400, (case, response.json())
        error = response.json()["error"]
        assert error["code"] == "invalid", case
        assert list(error["fields"]) == [field], (case, error)
    assert (
        client.post(
            "/api/v1/clusters/00000000-0000-0000-0000-000000000000/what-if",
            {"drain": [str(fleet.nodes[0].pk)]},
            format="json",
        ).status_code
        == 404
    )


def test_operator_what_if_refuses_a_name_it_does_not_take_at_any_depth(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    fleet = ready_fleet(nodes=1, gpus=8)
    client = _operator(build)
    now = timezone.now()
    reservation = {
        "project": str(tenant.project.pk),
        "gpu_model": "h100",
        "gpus": 1,
        "starts_at": now.isoformat(),
        "ends_at": (now + timedelta(hours=1)).isoformat(),
    }
    drain = [str(fleet.nodes[0].pk)]
    cases: dict[str, tuple[dict[str, Any], dict[str, list[str]], str]] = {
        "beside-the-drain": (
            {"drain": drain, "cordon": drain},
            {"cordon": ["Unknown field."]},
            "cordon",
        ),
        "in-the-reservation": (
            {"reservation": {**reservation, "gpu_count": 2}},
            {"reservation": ["gpu_count: Unknown field."]},
            "reservation.gpu_count",
        ),
    }
    for case, (body, fields, path) in cases.items():
        response = client.post(_what_if(fleet), body, format="json")
        assert response.status_code == 400, (case, response.json())
        assert response.json()["error"] == {
            "code": "unknown_field",
            "message": f"Not a field of this request: {path}.",
            "fields": fields,
        }, case


def test_non_operators_are_refused_the_operator_what_if(build: Builder, tenant: Tenant) -> None:
    fleet = ready_fleet(nodes=1, gpus=8)
    body = {"drain": [str(fleet.nodes[0].pk)]}
    for role in (Role.OWNER, Role.VIEWER):
        response = _client(build, tenant, role).post(_what_if(fleet), body, format="json")
        assert response.status_code == 403, role
    assert client_with_key(None).post(_what_if(fleet), body, format="json").status_code in {
        401,
        403,
    }


def test_the_price_comes_from_the_plan_the_workload_would_be_billed(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    ready_fleet(nodes=1, gpus=8)
    run(default_price_set, gpu_model="h100", price_per_gpu_hour_minor=250, currency="USD")
    run(
        default_price_set,
        gpu_model="h100",
        price_per_gpu_hour_minor=90,
        currency="USD",
        price_plan="preemptible",
    )
    client = _client(build, tenant)

    (estimate,) = client.post(
        ESTIMATE, _body(tenant, preemptible=True, gpus_per_node=2), format="json"
    ).json()["estimates"]

    assert (estimate["price_plan"], estimate["price_per_hour_minor"]) == ("preemptible", 180)


def test_work_from_an_offering_is_priced_at_the_offerings_catalog_price_in_its_region(
    build: Builder, tenant: Tenant, in_process: None
) -> None:
    commerce.shop()  # 1xh100 at 250 a GPU-hour on demand in eu-west; a default price differs
    run(default_price_set, gpu_model="h100", price_per_gpu_hour_minor=999, currency="USD")
    body = {
        "project": str(tenant.project.pk),
        "name": "probe",
        "offering": "1xh100",
        "region": commerce.REGION,
    }

    response = _client(build, tenant).post(ESTIMATE, body, format="json")

    assert response.status_code == 200, response.json()
    (estimate,) = response.json()["estimates"]
    assert (estimate["gpu_model"], estimate["region"], estimate["gpus"]) == ("h100", "eu-west", 1.0)
    assert (estimate["price_per_gpu_hour_minor"], estimate["price_per_hour_minor"]) == (250, 250)
    assert estimate["starts_now"]


def _gang_at_the_head(build: Builder, tenant: Tenant) -> None:
    """Eight 8-GPU H100 nodes and an 8-GPU A100 node; one H100 node busy for 10 min by its
    estimate, and a 64-GPU gang of another project waiting for every H100 (the head of the
    line: it holds back the H100 work that would not end before it could start)."""
    fleet = ready_fleet(nodes=8, gpus=8)
    model_node(fleet, "a100", gpus=8)
    _busy(tenant, 8)
    other = build.project(tenant.organization, "Pretraining")
    gang = run(
        services.workload_submit,
        project=other,
        spec=job("gang", gpus=8, nodes=8, runtime_estimate_s=3600),
    )
    assert Workload.objects.get(pk=gang.pk).status == "admitted"


@pytest.mark.parametrize(
    ("gpu_models", "runtime_estimate_s", "starts"),
    [
        pytest.param(["h100"], 3600.0, False, id="h100-longer-than-the-head-waits"),
        pytest.param(["h100"], None, False, id="h100-without-estimate"),
        pytest.param(["h100"], 5.0, True, id="h100-ending-before-the-head-backfills"),
        pytest.param(["h100", "a100"], None, False, id="h100-or-a100-waits-behind-the-head"),
        pytest.param([], 3600.0, False, id="any-model-waits-behind-the-head"),
        pytest.param(["a100"], None, True, id="a100-alone-is-not-held"),
    ],
)
def test_the_what_if_as_asked_and_the_dry_run_say_what_the_cycle_does_when_submitted(
    build: Builder,
    tenant: Tenant,
    in_process: None,
    gpu_models: list[str],
    runtime_estimate_s: float | None,
    starts: bool,
) -> None:
    _gang_at_the_head(build, tenant)
    client = _client(build, tenant)
    body = _body(tenant, gpu_models=gpu_models, gpus_per_node=4)
    body["runtime_estimate_s"] = runtime_estimate_s

    estimate = client.post(ESTIMATE, body, format="json").json()
    dry_run = client.post("/api/v1/workloads?dry_run=true", body, format="json").json()
    submitted = run(
        services.workload_submit,
        project=tenant.project,
        spec=replace(
            job("probe", gpus=4, runtime_estimate_s=runtime_estimate_s),
            gpu_models=tuple(gpu_models),
        ),
    )

    started = Workload.objects.get(pk=submitted.pk).status == "running"
    assert started is starts
    assert estimate["as_asked"]["starts_now"] is started, estimate
    assert dry_run["could_run_now"] is started, dry_run
    if not started:
        # Nothing in the summary says the form as asked starts now.
        said = estimate["summary"]
        assert "as asked" in said or not any(e["starts_now"] for e in estimate["estimates"])
        assert "head_of_line" in estimate["as_asked"]["basis"]
