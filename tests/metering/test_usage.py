"""Usage at period boundaries, preemption, fractional GPUs and open allocations; the usage
API: grouping, CSV, the daily series, bad parameters and tenant isolation."""

from __future__ import annotations

import csv
import io
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from inventory import services as inventory
from metering import selectors
from metering.models import UsageSlice
from tenants.models import Organization, Role
from tests.builders import Builder, client_with_key, run
from tests.builders.history import WHOLE, Log, catch_up

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@dataclass
class Customer:
    organization: Organization
    log: Log
    keys: dict[str, str]

    def get(self, path: str, role: str = Role.OWNER, **params: Any) -> Any:
        return client_with_key(self.keys[role]).get(path, params)


def customer(build: Builder, name: str, cluster_id: uuid.UUID) -> Customer:
    owner = build.user()
    organization = build.organization(name, owner=owner)
    keys = {Role.OWNER.value: build.key(organization, owner)[1]}
    for role in (Role.MEMBER, Role.VIEWER, Role.BILLING):
        keys[role.value] = build.key(organization, build.member(organization, role).user)[1]
    return Customer(organization, Log(build.project(organization), cluster_id), keys)


@pytest.fixture
def cluster_id() -> uuid.UUID:
    region = run(inventory.region_define, slug="eu-west", name="EU West")
    return run(inventory.cluster_define, region=region, slug="eu-west-1", name="EU 1").pk  # type: ignore[no-any-return]


@pytest.fixture
def acme(build: Builder, cluster_id: uuid.UUID) -> Customer:
    return customer(build, "Acme", cluster_id)


def test_a_job_across_the_months_end_is_split_at_utc_midnight(acme: Customer) -> None:
    workload = acme.log.submit(at("2025-01-31T23:00:00"))
    allocation = acme.log.grant(workload, at("2025-01-31T23:30:00"), [(2, WHOLE)])
    acme.log.release(workload, allocation, at("2025-02-01T00:45:00"))
    catch_up()

    slices = UsageSlice.objects.order_by("day").values_list("day", "milli_gpu_seconds")
    assert [(d.isoformat(), m) for d, m in slices] == [
        ("2025-01-31", 2 * 1800 * 1000),
        ("2025-02-01", 2 * 2700 * 1000),
    ]
    january = selectors.usage_lines(acme.organization.pk, at("2025-01-01"), at("2025-02-01"))
    february = selectors.usage_lines(acme.organization.pk, at("2025-02-01"), at("2025-03-01"))
    assert [line.milli_gpu_seconds for line in january] == [3_600_000]
    assert [line.milli_gpu_seconds for line in february] == [5_400_000]
    assert january[0].allocation_ids == february[0].allocation_ids == (allocation,)


def test_preemption_mid_hour_closes_the_interval_and_a_later_run_end_changes_nothing(
    acme: Customer,
) -> None:
    workload = acme.log.submit(at("2025-03-10T10:00:00"))
    allocation = acme.log.grant(workload, at("2025-03-10T10:00:00"), [(1, WHOLE)])
    acme.log.preempt(workload, allocation, at("2025-03-10T10:37:12.500000"))
    # The run's own end, racing the preemption, arrives later and claims a later end.
    acme.log.release(workload, allocation, at("2025-03-10T10:40:00"))
    catch_up()

    (line,) = selectors.usage_lines(acme.organization.pk, at("2025-03-01"), at("2025-04-01"))
    assert line.milli_gpu_seconds == 2_232_500  # 37 min 12.5 s of one GPU


def test_fractional_gpus_meter_milli_gpu_seconds_rounded_down_once(acme: Customer) -> None:
    workload = acme.log.submit(at("2025-03-10T10:00:00"))
    start = at("2025-03-10T10:00:00")
    # Two nodes: 3 GPUs at 250 milli and 1 at 125: 875 milli-GPU for 10.000001 s.
    allocation = acme.log.grant(workload, start, [(3, 250), (1, 125)])
    acme.log.release(workload, allocation, start + timedelta(seconds=10, microseconds=1))
    catch_up()

    (line,) = selectors.usage_lines(acme.organization.pk, at("2025-03-01"), at("2025-04-01"))
    assert line.milli_gpu_seconds == 8750  # floor(875 x 10.000001)


def test_an_open_allocation_is_metered_up_to_now_and_nothing_is_written_for_it(
    acme: Customer,
) -> None:
    granted = timezone.now() - timedelta(hours=2)
    workload = acme.log.submit(granted)
    acme.log.grant(workload, granted, [(4, WHOLE)])
    catch_up()

    before = timezone.now()
    body = acme.get("/api/v1/usage", **{"from": (granted - timedelta(days=40)).isoformat()})
    after = timezone.now()
    (row,) = body.json()["results"]
    low = 4000 * (before - granted) // timedelta(seconds=1)
    high = 4000 * (after - granted) // timedelta(seconds=1) + 1
    assert low <= row["milli_gpu_seconds"] <= high
    assert not UsageSlice.objects.exists()


def test_usage_grouped_by_project_model_plan_offering_and_region(acme: Customer) -> None:
    on_demand = acme.log.submit(at("2025-03-10T00:00:00"), offering="8xh100")
    spot = acme.log.submit(at("2025-03-10T00:00:00"), price_plan="preemptible")
    first = acme.log.grant(on_demand, at("2025-03-10T01:00:00"), [(8, WHOLE)])
    second = acme.log.grant(spot, at("2025-03-10T01:00:00"), [(1, WHOLE)], gpu_model="l4")
    acme.log.release(on_demand, first, at("2025-03-10T02:00:00"))
    acme.log.release(spot, second, at("2025-03-10T01:00:30"))
    catch_up()

    response = acme.get(
        "/api/v1/usage",
        group_by="project,gpu_model,price_plan,offering,region",
        **{"from": "2025-03-01", "to": "2025-04-01"},
    )
    assert response.status_code == 200, response.json()
    project = str(acme.log.project.pk)
    assert response.json()["results"] == [
        {
            "project": project,
            "gpu_model": "h100",
            "price_plan": "on_demand",
            "offering": "8xh100",
            "region": "eu-west",
            "gpu_seconds": "28800.000",
            "milli_gpu_seconds": 28_800_000,
        },
        {
            "project": project,
            "gpu_model": "l4",
            "price_plan": "preemptible",
            "offering": None,
            "region": "eu-west",
            "gpu_seconds": "30.000",
            "milli_gpu_seconds": 30_000,
        },
    ]


def test_csv_export_and_daily_series(acme: Customer) -> None:
    workload = acme.log.submit(at("2025-03-10T00:00:00"))
    allocation = acme.log.grant(workload, at("2025-03-10T23:00:00"), [(1, 500)])
    acme.log.release(workload, allocation, at("2025-03-11T01:00:00"))
    catch_up()
    window = {"from": "2025-03-09", "to": "2025-03-12"}

    for path, params in (("/api/v1/usage.csv", {}), ("/api/v1/usage", {"format": "csv"})):
        response = acme.get(path, group_by="day,gpu_model", **window, **params)
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/csv")
        assert list(csv.reader(io.StringIO(response.content.decode()))) == [
            ["day", "gpu_model", "gpu_seconds", "milli_gpu_seconds"],
            ["2025-03-10", "h100", "1800.000", "1800000"],
            ["2025-03-11", "h100", "1800.000", "1800000"],
        ]

    daily = acme.get("/api/v1/usage/daily", role=Role.BILLING, **window).json()["days"]
    assert [(d["day"], d["milli_gpu_seconds"]) for d in daily] == [
        ("2025-03-09", 0),
        ("2025-03-10", 1_800_000),
        ("2025-03-11", 1_800_000),
    ]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        pytest.param({"group_by": "colour"}, "group_by", id="unknown-dimension"),
        pytest.param({"group_by": "day,day"}, "group_by", id="dimension-twice"),
        pytest.param({"from": "last tuesday"}, "from", id="bad-from"),
        pytest.param({"to": "2025-13-01"}, "to", id="bad-to"),
        pytest.param({"from": "2025-03-02", "to": "2025-03-01"}, "to", id="to-before-from"),
        pytest.param({"organization": "acme"}, "organization", id="bad-organization"),
    ],
)
def test_bad_parameters_are_400_with_code_and_field(
    acme: Customer, params: dict[str, str], field: str
) -> None:
    response = acme.get("/api/v1/usage", **params)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert list(error["fields"]) == [field]


def test_a_daily_series_of_more_than_400_days_is_refused(acme: Customer) -> None:
    response = acme.get("/api/v1/usage/daily", **{"from": "2024-01-01", "to": "2025-03-01"})
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == ["to"]


def test_another_tenants_usage_never_appears_and_operators_see_all(
    build: Builder, acme: Customer, cluster_id: uuid.UUID
) -> None:
    globex = customer(build, "Globex", cluster_id)
    for tenant, gpus in ((acme, 1), (globex, 2)):
        workload = tenant.log.submit(at("2025-03-10T00:00:00"))
        allocation = tenant.log.grant(workload, at("2025-03-10T00:00:00"), [(gpus, WHOLE)])
        tenant.log.release(workload, allocation, at("2025-03-10T00:00:10"))
    catch_up()
    window = {"from": "2025-03-01", "to": "2025-04-01", "group_by": "organization"}

    for role in (Role.OWNER, Role.MEMBER, Role.VIEWER, Role.BILLING):
        rows = acme.get("/api/v1/usage", role=role, **window).json()["results"]
        assert rows == [
            {
                "organization": str(acme.organization.pk),
                "gpu_seconds": "10.000",
                "milli_gpu_seconds": 10_000,
            }
        ], role
    other = acme.get("/api/v1/usage", organization=str(globex.organization.pk), **window)
    assert other.json()["results"] == []

    operator = build.user("ops@neocloud.example", is_staff=True)
    ops = build.organization("Ops", owner=operator)
    key = client_with_key(build.key(ops, operator)[1])
    rows = key.get("/api/v1/usage", window).json()["results"]
    assert {r["organization"]: r["milli_gpu_seconds"] for r in rows} == {
        str(acme.organization.pk): 10_000,
        str(globex.organization.pk): 20_000,
    }
    only = key.get("/api/v1/usage", {**window, "organization": str(globex.organization.pk)})
    assert [r["milli_gpu_seconds"] for r in only.json()["results"]] == [20_000]


def test_usage_needs_authentication() -> None:
    assert client_with_key(None).get("/api/v1/usage").status_code == 401
