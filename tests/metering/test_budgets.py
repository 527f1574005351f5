"""Budgets: set and cleared as events by owners and admins, read by every role that reads
usage; thresholds of 50, 80 and 100 % recorded once each per month, with a log line; a hard
stop refuses new orders and leaves running work alone."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from events import store
from metering import events as mev
from metering import services
from metering.models import Budget
from neocloud.core.transactions import atomic_with_retry
from scheduler.errors import PaymentRequired
from scheduler.models import Workload
from tenants.models import Project, Role
from tests.builders import Builder, run
from tests.builders import commerce as commerce_builders
from tests.builders.commerce import Customer, Shop
from tests.builders.history import WHOLE, Log, catch_up

pytestmark = pytest.mark.postgres


@pytest.fixture
def shop() -> Shop:
    return commerce_builders.shop()


@pytest.fixture
def customer(build: Builder, shop: Shop) -> Customer:
    return commerce_builders.customer(build)


def _use(customer: Customer, shop: Shop, gpu_hours: int) -> None:
    """Closed usage of this month: ``gpu_hours`` x 60 GPUs for the minute before the last
    second (this month's unless the month is younger than that)."""
    log = Log(customer.project, shop.cluster.pk)
    end = timezone.now() - timedelta(seconds=1)
    start = end - timedelta(minutes=1)
    workload = log.submit(start)
    allocation = log.grant(workload, start, [(gpu_hours * 60, WHOLE)])
    log.release(workload, allocation, end)
    catch_up()


def _budget(customer: Customer, role: str = Role.OWNER, **body: object) -> Any:
    return customer.client(role).post(
        "/api/v1/budgets", {"organization": str(customer.organization.pk), **body}, format="json"
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("role", "status"),
    [
        pytest.param(Role.OWNER, 201, id="owner"),
        pytest.param(Role.ADMIN, 201, id="admin"),
        pytest.param(Role.MEMBER, 403, id="member"),
        pytest.param(Role.VIEWER, 403, id="viewer"),
        pytest.param(Role.BILLING, 403, id="billing"),
    ],
)
def test_owners_and_admins_set_budgets(customer: Customer, role: str, status: int) -> None:
    response = _budget(customer, role, gpu_hours="12.5")
    assert response.status_code == status, response.json()
    assert Budget.objects.exists() == (status == 201)


@pytest.mark.django_db
def test_a_budget_is_an_event_stream_read_by_billing_and_cleared(
    build: Builder, customer: Customer
) -> None:
    created = _budget(customer, gpu_hours="12.5", hard_stop=True).json()
    assert (created["gpu_hours"], created["limit_milli_gpu_seconds"]) == ("12.500", 45_000_000)
    again = _budget(customer, gpu_hours="20").json()
    assert again["id"] == created["id"]
    assert [e.type for e in store.read_stream(mev.BUDGET_STREAM, created["id"])] == [
        "metering.BudgetSet",
        "metering.BudgetSet",
    ]
    listed = customer.get("/api/v1/budgets", role=Role.BILLING).json()["results"]
    assert [(b["id"], b["gpu_hours"], b["hard_stop"]) for b in listed] == [
        (created["id"], "20.000", False)
    ]
    stranger = commerce_builders.customer(build, "Globex")
    assert stranger.get("/api/v1/budgets").json()["results"] == []
    assert stranger.get(f"/api/v1/budgets/{created['id']}").status_code == 404
    assert stranger.client().delete(f"/api/v1/budgets/{created['id']}").status_code == 404

    assert (
        customer.client(Role.MEMBER).delete(f"/api/v1/budgets/{created['id']}").status_code == 403
    )
    assert customer.client().delete(f"/api/v1/budgets/{created['id']}").status_code == 204
    assert not Budget.objects.exists()
    assert store.read_stream(mev.BUDGET_STREAM, created["id"])[-1].type == "metering.BudgetCleared"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param({"gpu_hours": "0"}, "gpu_hours", id="zero"),
        pytest.param({"gpu_hours": "1.0001"}, "gpu_hours", id="too-precise"),
        pytest.param({"gpu_hours": "1", "hard_stop": True, "project": None}, None, id="ok"),
    ],
)
def test_bad_budgets_are_400_with_their_field(
    customer: Customer, body: dict[str, object], field: str | None
) -> None:
    response = _budget(customer, Role.OWNER, **body)
    if field is None:
        assert response.status_code == 201
        return
    assert response.status_code == 400
    assert list(response.json()["error"]["fields"]) == [field]


@pytest.mark.django_db
def test_a_projects_budget_alerts_but_cannot_hard_stop(customer: Customer) -> None:
    project = str(customer.project.pk)
    refused = _budget(customer, project=project, gpu_hours="1", hard_stop=True)
    assert refused.status_code == 400
    assert list(refused.json()["error"]["fields"]) == ["hard_stop"]
    assert _budget(customer, project=project, gpu_hours="1").status_code == 201


@pytest.mark.django_db
def test_thresholds_are_recorded_once_each_per_month_with_a_log_line(
    customer: Customer,
    shop: Shop,
    caplog: pytest.LogCaptureFixture,
    django_capture_on_commit_callbacks: object,
) -> None:
    budget = run(
        services.budget_set, organization=customer.organization, gpu_hours=10, hard_stop=False
    )
    project_budget = run(
        services.budget_set,
        organization=customer.organization,
        project=customer.project,
        gpu_hours=100,
    )

    def check() -> list[int]:
        with django_capture_on_commit_callbacks(execute=True):  # type: ignore[operator]
            return [a.threshold_percent for a in atomic_with_retry(services.budgets_check)]

    assert check() == []
    _use(customer, shop, 6)
    with caplog.at_level(logging.WARNING, logger="metering.services"):
        assert check() == [50]
    assert "reached 50% of its" in caplog.text
    assert "6.000 of 10.000 GPU-hours" in caplog.text
    assert check() == []
    _use(customer, shop, 3)
    assert check() == [80]
    _use(customer, shop, 2)
    assert check() == [100]
    assert check() == []
    reached = [
        (e.data["threshold_percent"], e.data["month"])
        for e in store.read_stream(mev.BUDGET_STREAM, str(budget.pk))
        if e.type == "metering.BudgetThresholdReached"
    ]
    month = timezone.now().strftime("%Y-%m")
    assert reached == [(50, month), (80, month), (100, month)]
    assert len(store.read_stream(mev.BUDGET_STREAM, str(project_budget.pk))) == 1  # 11 of 100 h


@pytest.mark.django_db(transaction=True)
def test_hard_stop_refuses_new_orders_and_leaves_running_work_alone(
    customer: Customer, shop: Shop, in_process: None
) -> None:
    run(services.budget_set, organization=customer.organization, gpu_hours=2, hard_stop=True)
    first = customer.post_order(offering="1xh100", price_plan="on_demand", runtime_estimate_s=600)
    assert first.status_code == 201, first.json()
    workload_id = first.json()["workload_id"]
    assert Workload.objects.get(pk=workload_id).status == "running"

    _use(customer, shop, 2)
    refused = customer.post_order(offering="1xh100", price_plan="on_demand")
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "payment_required"
    assert error["message"].startswith("budget exhausted: organization acme used 2.0")
    with pytest.raises(PaymentRequired):
        commerce_builders.order(customer.project, "1xh100")

    time.sleep(0.1)
    workload = Workload.objects.get(pk=workload_id)
    assert workload.status == "running"
    assert [e.type for e in store.read_stream("workload", workload_id)][-1] == (
        "scheduler.WorkloadRunning"
    )


def _use_in(project: Project, shop: Shop, gpus: int) -> None:
    """``gpus`` GPUs for the minute before the last second, in ``project``."""
    log = Log(project, shop.cluster.pk)
    end = timezone.now() - timedelta(seconds=1)
    workload = log.submit(end - timedelta(minutes=1))
    log.release(workload, log.grant(workload, end - timedelta(minutes=1), [(gpus, WHOLE)]), end)


@pytest.mark.django_db
def test_a_page_of_budgets_reads_its_usage_at_once_and_each_budget_its_own(
    build: Builder, customer: Customer, shop: Shop
) -> None:
    organization = customer.organization
    projects = [customer.project, *(build.project(organization, f"P{i}") for i in range(3))]
    for gpus, project in enumerate(projects, start=1):
        _use_in(project, shop, gpus)
    catch_up()
    run(services.budget_set, organization=organization, gpu_hours=100)
    run(services.budget_set, organization=organization, project=projects[0], gpu_hours=100)

    def listed() -> tuple[dict[str | None, int], int]:
        with CaptureQueriesContext(connection) as queries:
            rows = customer.get("/api/v1/budgets").json()["results"]
        return {r["project"]: r["month_used_milli_gpu_seconds"] for r in rows}, len(queries)

    listed()  # once before counting: the key's first use of the day records it
    few, few_queries = listed()
    for project in projects[1:]:
        run(services.budget_set, organization=organization, project=project, gpu_hours=100)
    many, many_queries = listed()

    minute = 60 * WHOLE
    assert few == {None: 10 * minute, str(projects[0].pk): minute}
    each: dict[str | None, int] = {str(p.pk): n * minute for n, p in enumerate(projects, start=1)}
    assert many == {None: 10 * minute, **each}
    assert many_queries == few_queries
