"""Every way of starting work checks the same rules: the workloads and reservations API (and
any caller of their services) are refused while payment is required, once the budget's hard
stop or a quota's monthly GPU-hours are spent, and above the approval threshold, as orders
are; reservations count against the quota of their window."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from inventory import services as inventory
from inventory.models import GpuModel
from metering import services as metering
from metering.models import OpenAllocation
from neocloud.core.errors import ApplicationError
from orders import services as orders
from orders.models import Order
from scheduler import hooks
from scheduler import services as scheduler
from scheduler.models import Reservation, Workload
from scheduler.specs import WorkloadSpec
from tenants import services as tenants
from tenants.models import Organization, Project, Role
from tests.builders import Builder, run
from tests.builders import commerce as commerce_builders
from tests.builders.commerce import Customer, Shop
from tests.builders.history import WHOLE, Log, catch_up

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

WORKLOAD: dict[str, Any] = {"name": "train", "gpu_models": ["h100"], "gpus_per_node": 1}


@pytest.fixture
def shop() -> Shop:
    return commerce_builders.shop()


@pytest.fixture
def customer(build: Builder, shop: Shop) -> Customer:
    return commerce_builders.customer(build)


def _window(hours_from_now: float = 1, hours: float = 2) -> tuple[datetime, datetime]:
    start = timezone.now() + timedelta(hours=hours_from_now)
    return start, start + timedelta(hours=hours)


def _post_workload(customer: Customer, role: str = Role.MEMBER, **body: Any) -> Any:
    return customer.client(role).post(
        "/api/v1/workloads",
        {"project": str(customer.project.pk), **WORKLOAD, **body},
        format="json",
    )


def _post_reservation(
    customer: Customer, gpus: int = 1, window: tuple[datetime, datetime] | None = None, **body: Any
) -> Any:
    starts_at, ends_at = window or _window()
    return customer.client(Role.MEMBER).post(
        "/api/v1/reservations",
        {
            "project": str(customer.project.pk),
            "gpu_model": "h100",
            "gpus": gpus,
            "starts_at": starts_at.isoformat(),
            "ends_at": ends_at.isoformat(),
            **body,
        },
        format="json",
    )


POSTS: list[Any] = [
    pytest.param(_post_workload, id="workload"),
    pytest.param(_post_reservation, id="reservation"),
]


def _nothing_started() -> None:
    assert not Workload.objects.exists()
    assert not Reservation.objects.exists()


def _use(customer: Customer, shop: Shop, gpu_hours: int, gpu_model: str = "h100") -> None:
    """Closed usage of this month: ``gpu_hours`` x 60 GPUs for the minute before the last
    second."""
    log = Log(customer.project, shop.cluster.pk)
    end = timezone.now() - timedelta(seconds=1)
    start = end - timedelta(minutes=1)
    workload = log.submit(start)
    allocation = log.grant(workload, start, [(gpu_hours * 60, WHOLE)], gpu_model=gpu_model)
    log.release(workload, allocation, end)
    catch_up()


@pytest.fixture
def in_dunning() -> Iterator[Callable[[Organization], str | None]]:
    """Billing's answer while an invoice is unpaid after dunning gave up."""

    def overdue(organization: Organization) -> str | None:
        return f"invoice of {organization.slug} is unpaid after 4 failed payment attempts"

    with hooks.payment_check.registered(overdue):
        yield overdue


# --- standing --------------------------------------------------------------------------------


@pytest.mark.usefixtures("in_dunning")
@pytest.mark.parametrize("post", POSTS)
def test_api_submissions_are_refused_while_in_dunning(customer: Customer, post: Any) -> None:
    response = post(customer)

    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["code"] == "payment_required"
    assert error["message"] == "invoice of acme is unpaid after 4 failed payment attempts"
    assert error["fields"] == {"organization": [error["message"]]}
    _nothing_started()


@pytest.mark.parametrize("post", POSTS)
def test_api_submissions_are_refused_once_the_hard_stop_budget_is_spent(
    customer: Customer, shop: Shop, post: Any
) -> None:
    run(metering.budget_set, organization=customer.organization, gpu_hours=2, hard_stop=True)
    _use(customer, shop, 2)

    response = post(customer)

    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["code"] == "payment_required"
    assert error["message"].startswith("budget exhausted: organization acme used 2.000 of 2.000")
    assert not Workload.objects.exclude(name="w").exists()  # "w": the usage's own
    assert not Reservation.objects.exists()


@pytest.mark.usefixtures("in_dunning")
def test_the_services_themselves_check_standing(customer: Customer) -> None:
    """An admin action or a console page calling the service is refused the same way."""
    starts_at, ends_at = _window()
    with pytest.raises(ApplicationError) as workload:
        run(scheduler.workload_submit, project=customer.project, spec=WorkloadSpec("x", ("h100",)))
    with pytest.raises(ApplicationError) as reservation:
        run(
            scheduler.reservation_create,
            project=customer.project,
            gpu_model="h100",
            gpus=1,
            starts_at=starts_at,
            ends_at=ends_at,
        )

    assert (workload.value.code, reservation.value.code) == ("payment_required",) * 2
    _nothing_started()


# --- approval --------------------------------------------------------------------------------


def test_a_direct_submission_over_the_approval_threshold_is_refused_an_order_waits(
    customer: Customer,
) -> None:
    run(orders.approval_threshold_set, threshold_gpus=8)

    at_threshold = _post_workload(customer, gpus_per_node=8)
    over = _post_workload(customer, gpus_per_node=8, nodes=2, name="big")
    ordered = customer.post_order(offering="h100-training", price_plan="on_demand", quantity=2)

    assert at_threshold.status_code == 201, at_threshold.json()
    assert over.status_code == 403, over.json()
    error = over.json()["error"]
    assert error["code"] == "approval_required"
    assert error["message"] == (
        "16 GPUs is over the approval threshold of 8: order it (POST /api/v1/orders),"
        " an operator approves it"
    )
    assert error["fields"] == {"gpus_per_node": [error["message"]]}
    assert list(Workload.objects.values_list("name", flat=True)) == ["train"]
    assert ordered.status_code == 201
    assert ordered.json()["status"] == "validated"


def test_a_large_reservation_is_refused_directly_and_ordered_it_waits_for_approval(
    customer: Customer,
) -> None:
    run(orders.approval_threshold_set, threshold_gpus=4)
    starts_at, ends_at = _window()

    direct = _post_reservation(customer, gpus=8, window=(starts_at, ends_at))
    ordered = customer.post_order(
        offering="h100-reserved",
        price_plan="reserved",
        quantity=8,
        starts_at=starts_at.isoformat(),
        ends_at=ends_at.isoformat(),
    )

    assert direct.status_code == 403, direct.json()
    assert direct.json()["error"]["code"] == "approval_required"
    assert direct.json()["error"]["fields"] == {"gpus": [direct.json()["error"]["message"]]}
    assert ordered.json()["status"] == "validated"
    assert not Reservation.objects.exists()

    approved = run(orders.order_approve, order=Order.objects.get(pk=ordered.json()["id"]))

    reservation = Reservation.objects.get()
    assert (approved.status, approved.reservation_id) == ("fulfilled", reservation.pk)
    assert (reservation.gpus, reservation.order_id) == (8, approved.pk)


# --- reservations and quota -------------------------------------------------------------------


@pytest.mark.parametrize("scope", ["project", "organization"])
def test_reservations_count_against_the_quota_of_their_window(
    build: Builder, customer: Customer, scope: str
) -> None:
    run(
        tenants.quota_set,
        organization=customer.organization,
        project=customer.project if scope == "project" else None,
        gpu_model="h100",
        max_gpus=8,
    )
    # With an organization's quota, the reservations of all its projects count together.
    other = build.project(customer.organization, "Other") if scope == "organization" else None
    morning, overlapping, evening = _window(1, 2), _window(2, 2), _window(3, 2)

    first = _post_reservation(customer, gpus=6, window=morning)
    over = _post_reservation(
        customer, gpus=3, window=overlapping, **({"project": str(other.pk)} if other else {})
    )
    fits = _post_reservation(customer, gpus=2, window=overlapping)
    later = _post_reservation(customer, gpus=8, window=(morning[1], evening[1]))

    assert [r.status_code for r in (first, over, fits, later)] == [201, 400, 201, 400]
    error = over.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert error["message"] == (
        f"{scope} {customer.project.slug if scope == 'project' else customer.organization.slug}"
        " may hold 8 h100; 6 are reserved in that window, 3 more do not fit"
    )
    assert error["fields"] == {"gpus": [error["message"]]}
    assert error["details"] == {"quota": 8, "reserved": 6}
    assert later.json()["error"]["details"] == {"quota": 8, "reserved": 2}
    assert sorted(Reservation.objects.values_list("gpus", flat=True)) == [2, 6]


def test_a_reservation_larger_than_the_quota_is_refused(customer: Customer) -> None:
    run(tenants.quota_set, organization=customer.organization, gpu_model="h100", max_gpus=4)

    response = _post_reservation(customer, gpus=5)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "quota_exceeded"
    assert response.json()["error"]["details"] == {"quota": 4, "reserved": 0}
    _nothing_started()


# --- monthly GPU-hours ------------------------------------------------------------------------


@pytest.mark.parametrize("scope", ["organization", "project"])
def test_new_work_is_refused_once_the_months_gpu_hours_are_spent(
    customer: Customer, shop: Shop, scope: str
) -> None:
    run(
        tenants.quota_set,
        organization=customer.organization,
        project=customer.project if scope == "project" else None,
        gpu_model="h100",
        max_gpus=16,
        monthly_gpu_hours=2,
    )
    log = Log(customer.project, shop.cluster.pk)
    running = log.submit(timezone.now() - timedelta(minutes=5))
    log.grant(running, timezone.now() - timedelta(minutes=5), [(1, WHOLE)])
    _use(customer, shop, 2)

    workload = _post_workload(customer)
    reservation = _post_reservation(customer)
    order = customer.post_order(offering="1xh100", price_plan="on_demand")
    other_model = _post_workload(customer, gpu_models=["l4"], name="small")

    for response in (workload, reservation, order):
        assert response.status_code == 409, response.json()
        error = response.json()["error"]
        assert error["code"] == "gpu_hours_exhausted"
        assert error["message"].startswith(
            f"{scope} {customer.project.slug if scope == 'project' else 'acme'} used 2.08"
        )
        assert error["message"].endswith("of its 2 h100 GPU-hours this month")
        assert error["details"]["monthly_gpu_hours"] == 2
    assert other_model.status_code == 201, other_model.json()
    # Running work is not stopped: its allocation stays open, its workload holds it.
    assert OpenAllocation.objects.filter(workload_id=running).exists()
    assert Workload.objects.get(pk=running).allocation_id is not None
    assert not Order.objects.exists()
    assert not Reservation.objects.exists()


def test_gpu_hours_under_the_limit_leave_work_alone(customer: Customer, shop: Shop) -> None:
    run(
        tenants.quota_set,
        organization=customer.organization,
        gpu_model="h100",
        max_gpus=16,
        monthly_gpu_hours=3,
    )
    _use(customer, shop, 2)

    assert _post_workload(customer).status_code == 201


@pytest.mark.django_db(transaction=True)
def test_concurrent_reservations_on_two_clusters_stay_within_the_organizations_quota(
    build: Builder, customer: Customer, shop: Shop
) -> None:
    """Each reservation locks its organization before it counts: two projects reserving at
    once in two regions (two clusters, so the clusters' locks do not serialise them)."""
    east = commerce_builders.region("us-east")
    cluster = run(inventory.cluster_define, region=east, slug="us-east-1", name="US East 1")
    commerce_builders.node(cluster, "h100-east", GpuModel.objects.get(slug="h100"))
    run(tenants.quota_set, organization=customer.organization, gpu_model="h100", max_gpus=8)
    projects = [customer.project, build.project(customer.organization, "Other")]
    starts_at, ends_at = _window()
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def reserve(project: Project, region: str) -> None:
        barrier.wait()
        try:
            run(
                scheduler.reservation_create,
                project=project,
                gpu_model="h100",
                gpus=5,
                starts_at=starts_at,
                ends_at=ends_at,
                region=region,
            )
            outcomes.append("reserved")
        except ApplicationError as refused:
            outcomes.append(refused.code)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=reserve, args=(project, region))
        for project, region in zip(projects, ["eu-west", "us-east"], strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(outcomes) == ["quota_exceeded", "reserved"]
    assert list(Reservation.objects.values_list("gpus", flat=True)) == [5]
