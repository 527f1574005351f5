"""Queues and quotas, and reservations: the API's figures for the same member; a reservation
created and cancelled through the page writes what the API writes; bad input and a viewer's
forged form write nothing; another organization's reservation is a 404; bounded queries;
and, in Chromium, a reservation created and cancelled from the page."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from playwright.sync_api import Page, expect

from events.models import Event
from metering.intervals import gpu_hours
from metering.selectors import month_usage_by_model
from scheduler import services as scheduler
from scheduler import tasks
from scheduler.models import Reservation, ReservationStatus
from tenants import services as tenants
from tests.builders import Builder, client_with_key, run
from tests.builders.history import catch_up
from tests.console.conftest import Member, Role, member_of, serious_violations, sign_in
from tests.scheduler.conftest import job, ready_fleet

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

FIELDS = [
    "organization_id",
    "project_id",
    "cluster_id",
    "gpu_model",
    "gpus",
    "starts_at",
    "ends_at",
    "status",
    "offering",
    "order_id",
]


def _window(days: int = 1, hours: int = 6) -> tuple[datetime, datetime]:
    start = timezone.now().replace(second=0, microsecond=0) + timedelta(days=days)
    return start, start + timedelta(hours=hours)


def _form(member: Member, window: tuple[datetime, datetime], **fields: Any) -> dict[str, Any]:
    return {
        "project": str(member.project.pk),
        "gpu_model": "h100",
        "gpus": 2,
        "starts_at": f"{window[0]:%Y-%m-%dT%H:%M}",
        "ends_at": f"{window[1]:%Y-%m-%dT%H:%M}",
        "region": "",
        **fields,
    }


def _signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _created_events() -> list[dict[str, Any]]:
    rows = Event.objects.filter(type="scheduler.ReservationCreated").order_by("position")
    return [{k: v for k, v in e.data.items() if k != "reservation_id"} for e in rows]


@pytest.mark.django_db(transaction=True)
def test_queues_show_the_apis_usage_quota_borrowing_and_depth(
    build: Builder, member: Member, in_process: None
) -> None:
    ready_fleet(nodes=1, gpus=8)
    inference = build.project(member.organization, "Inference")
    # Training's own 2, the organization's 5 over all of its projects (Inference inherits it).
    run(tenants.quota_set, organization=member.organization, gpu_model="h100", max_gpus=5)
    run(
        tenants.quota_set,
        organization=member.organization,
        project=member.project,
        gpu_model="h100",
        max_gpus=2,
        monthly_gpu_hours=10,
    )
    short = run(scheduler.workload_submit, project=member.project, spec=job("short", gpus=2))
    time.sleep(0.3)
    tasks.tick()
    catch_up()  # the short run is metered: closed this month
    short.refresh_from_db()
    assert short.status == "succeeded"
    serving = job("serving", gpus=1, runtime_estimate_s=600)
    run(scheduler.workload_submit, project=inference, spec=serving)  # in the cohort: lends 4
    for name in ("own", "borrowing", "waiting"):  # 2 of its own, 2 borrowed, 2 over 5
        spec = job(name, gpus=2, runtime_estimate_s=600)
        run(scheduler.workload_submit, project=member.project, spec=spec)
    _, secret = build.key(member.organization, member.user)
    api = {q["project"]: q for q in client_with_key(secret).get("/api/v1/queues").json()}

    response = _signed_in(member.user).get("/queues")

    assert response.status_code == 200
    shown = {q.project.pk: q for q in response.context["queues"]}
    training, other = shown[member.project.pk], shown[inference.pk]
    queue = api[str(member.project.pk)]
    assert (training.depth, training.running) == (queue["depth"], queue["running"]) == (1, 2)
    assert training.cohort == queue["cohort"] == f"org-{member.organization.pk}"
    (h100,) = training.models
    assert [{"gpu_model": h100.gpu_model, "used": h100.held, "quota": h100.max_gpus}] == queue[
        "usage"
    ]
    assert (h100.held, h100.max_gpus, h100.quota_of) == (4.0, 2, "project")
    assert (h100.borrowed, h100.lendable) == (2.0, 0.0)
    assert h100.monthly_gpu_hours == 10
    metered = month_usage_by_model(member.organization.pk, member.project.pk, timezone.now())
    assert metered["h100"] > 0  # the short run: 2 GPUs for a fraction of a second
    assert h100.month_gpu_hours == gpu_hours(metered["h100"]) == "0.000"
    (idle,) = other.models
    assert (idle.held, idle.max_gpus, idle.quota_of, idle.lendable) == (
        1.0,
        5,
        "organization",
        4.0,
    )
    assert api[str(inference.pk)]["usage"] == [{"gpu_model": "h100", "used": 1.0, "quota": 5}]
    html = response.content.decode()
    assert '<dd data-figure="depth">1</dd>' in html
    assert '<td data-figure="borrowed">2</td>' in html
    assert '<td data-figure="monthly_gpu_hours">10</td>' in html


def test_the_queues_page_costs_the_same_queries_for_one_project_as_for_many(
    build: Builder, member: Member, django_assert_max_num_queries: object
) -> None:
    client = _signed_in(member.user)
    run(tenants.quota_set, organization=member.organization, gpu_model="h100", max_gpus=8)
    with django_assert_max_num_queries(15):  # type: ignore[operator]
        assert client.get("/queues").status_code == 200
    for i in range(8):
        project = build.project(member.organization, f"P{i}")
        run(
            tenants.quota_set,
            organization=member.organization,
            project=project,
            gpu_model="h100",
            max_gpus=1,
        )
    with django_assert_max_num_queries(15):  # type: ignore[operator]
        response = client.get("/queues")
    assert len(response.context["queues"]) == 9


def test_a_reservation_made_on_the_page_is_what_the_api_makes(
    build: Builder, member: Member
) -> None:
    fleet = ready_fleet(nodes=1)
    window = _window()
    client = _signed_in(member.user)

    response = client.post("/reservations/new", _form(member, window))

    assert response.status_code == 302
    assert response["Location"] == "/reservations"
    _, secret = build.key(member.organization, member.user)
    api = client_with_key(secret).post(
        "/api/v1/reservations",
        {
            "project": str(member.project.pk),
            "gpu_model": "h100",
            "gpus": 2,
            "starts_at": window[0].isoformat(),
            "ends_at": window[1].isoformat(),
        },
        format="json",
    )
    assert api.status_code == 201, api.json()
    console_made, api_made = (
        Reservation.objects.exclude(pk=api.json()["id"]).get(),
        Reservation.objects.get(pk=api.json()["id"]),
    )
    assert [getattr(console_made, f) for f in FIELDS] == [getattr(api_made, f) for f in FIELDS]
    assert console_made.cluster_id == fleet.cluster.pk
    assert console_made.starts_at == window[0]
    first, second = _created_events()
    assert first == second
    page = client.get("/reservations").content.decode()
    assert "Reserved 2 h100 GPUs for Training." in page
    assert f'id="nc-reservation-{console_made.pk}"' in page
    assert page.count('class="nc-timeline-bar"') == 2


def test_a_reservation_cancelled_on_the_page_is_cancelled_as_the_api_does(
    build: Builder, member: Member
) -> None:
    ready_fleet(nodes=1)
    start, end = _window(days=2)  # before the notice period: free
    ours, theirs = (
        run(
            scheduler.reservation_create,
            project=member.project,
            gpu_model="h100",
            gpus=1,
            starts_at=start,
            ends_at=end,
        )
        for _ in range(2)
    )
    client = _signed_in(member.user)
    key, secret = build.key(member.organization, member.user)

    assert client.post(f"/reservations/{ours.pk}/cancel").status_code == 302
    client_with_key(secret).post(f"/api/v1/reservations/{theirs.pk}/cancel", {}, format="json")

    ours.refresh_from_db()
    theirs.refresh_from_db()
    assert ours.status == theirs.status == ReservationStatus.CANCELLED
    cancelled = Event.objects.filter(type="scheduler.ReservationCancelled").order_by("position")
    assert [e.data["reason"] for e in cancelled] == [
        f"cancelled by user:{member.user.pk}",
        f"cancelled by api_key:{key.prefix}",
    ]
    page = client.get("/reservations").content.decode()
    assert "Reservation cancelled at no charge." in page  # the confirmation says what it cost
    assert 'class="nc-timeline-bar"' not in page
    assert f'action="/reservations/{ours.pk}/cancel"' not in page


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        pytest.param({"gpus": 0}, "gpus", "greater than or equal to 1", id="no-gpus"),
        pytest.param({"starts_at": "tomorrow"}, "starts_at", "Enter a valid date", id="bad-date"),
        pytest.param({"gpu_model": "tpu"}, "gpu_model", "Select a valid choice", id="unknown"),
        pytest.param({"gpus": 9}, "", "cluster fra1 has 8 h100", id="over-the-fleet"),
        pytest.param({"gpus": 3, "quota": 2}, "gpus", "may hold 2 h100", id="over-the-quota"),
        pytest.param(
            {"ends_at": "2020-01-01T00:00"}, "ends_at", "the window must end after", id="reversed"
        ),
    ],
)
def test_bad_input_is_shown_beside_its_field_and_writes_nothing(
    member: Member, fields: dict[str, Any], field: str, message: str
) -> None:
    ready_fleet(nodes=1)
    quota = fields.pop("quota", None)
    if quota is not None:
        run(
            tenants.quota_set,
            organization=member.organization,
            project=member.project,
            gpu_model="h100",
            max_gpus=quota,
        )
    response = _signed_in(member.user).post("/reservations/new", _form(member, _window(), **fields))

    assert response.status_code in {400, 409}
    form = response.context["form"]
    errors = form.errors.get(field or "__all__")
    assert errors, form.errors
    assert message in " ".join(errors)
    html = response.content.decode()
    if field:
        assert f'<small class="nc-error" data-field="{field}">' in html
    assert not Reservation.objects.exists()


def test_a_viewer_sees_no_buttons_and_a_forged_form_writes_nothing(
    build: Builder, member: Member
) -> None:
    ready_fleet(nodes=1)
    start, end = _window()
    reservation = run(
        scheduler.reservation_create,
        project=member.project,
        gpu_model="h100",
        gpus=1,
        starts_at=start,
        ends_at=end,
    )
    viewer = _signed_in(member_of(build, member.organization, Role.VIEWER, "viewer@acme.test"))

    page = viewer.get("/reservations").content.decode()
    assert f'id="nc-reservation-{reservation.pk}"' in page
    assert "Cancel" not in page
    assert 'action="/reservations/new"' not in page

    forged = viewer.post("/reservations/new", _form(member, _window(days=2)))
    assert forged.status_code == 403
    refused = viewer.post(f"/reservations/{reservation.pk}/cancel")
    assert refused.status_code == 403
    assert list(Reservation.objects.values_list("pk", "status")) == [
        (reservation.pk, ReservationStatus.ACTIVE)
    ]


def test_another_organizations_reservation_is_a_404(build: Builder, member: Member) -> None:
    ready_fleet(nodes=1)
    other = build.organization("Globex")
    start, end = _window()
    theirs = run(
        scheduler.reservation_create,
        project=build.project(other, "Theirs"),
        gpu_model="h100",
        gpus=1,
        starts_at=start,
        ends_at=end,
    )
    client = _signed_in(member.user)
    assert client.post(f"/reservations/{theirs.pk}/cancel").status_code == 404
    assert client.post("/reservations/not-a-uuid/cancel").status_code == 404
    assert f"nc-reservation-{theirs.pk}" not in client.get("/reservations").content.decode()
    theirs.refresh_from_db()
    assert theirs.status == ReservationStatus.ACTIVE


def test_the_reservations_page_costs_the_same_queries_for_2_rows_as_for_12(
    member: Member, django_assert_max_num_queries: object
) -> None:
    ready_fleet(nodes=2)
    client = _signed_in(member.user)

    def reserve(count: int) -> None:
        for i in range(count):
            start, end = _window(days=1 + i % 10)
            run(
                scheduler.reservation_create,
                project=member.project,
                gpu_model="h100",
                gpus=1,
                starts_at=start,
                ends_at=end,
            )

    reserve(2)
    with django_assert_max_num_queries(14):  # type: ignore[operator]
        assert client.get("/reservations").status_code == 200
    reserve(10)
    with django_assert_max_num_queries(14):  # type: ignore[operator]
        response = client.get("/reservations")
    assert len(response.context["reservations"].current) == 12


@pytest.mark.django_db(transaction=True)
def test_a_member_reserves_and_cancels_from_the_page(
    page: Page, live_server: object, member: Member
) -> None:
    base = str(live_server)
    ready_fleet(nodes=1)
    sign_in(page, base, member.user.email)
    page.goto(f"{base}/queues")
    expect(page.get_by_role("heading", name="Training")).to_be_visible()
    assert serious_violations(page) == []

    page.goto(f"{base}/reservations")
    assert serious_violations(page) == []
    page.get_by_label("GPUs").fill("3")
    page.get_by_role("button", name="Reserve").click()

    expect(page.get_by_role("status")).to_have_text("Reserved 3 h100 GPUs for Training.")
    reservation = Reservation.objects.get()
    assert (reservation.gpus, reservation.status) == (3, ReservationStatus.ACTIVE)
    row = page.locator(f"#nc-reservation-{reservation.pk}")
    expect(row.locator("td.nc-status")).to_have_text("Active")
    expect(page.locator(".nc-timeline-label")).to_contain_text("Training: 3 \u00d7 h100")
    assert serious_violations(page) == []

    row.get_by_role("button", name="Cancel").click()
    expect(page.get_by_role("status")).to_have_text(
        "Reservation cancelled; its whole window is still billed (cancelled within the notice"
        " period before its start, or after it)."
    )
    expect(row.locator("td.nc-status")).to_have_text("Cancelled")
    reservation.refresh_from_db()
    assert reservation.status == ReservationStatus.CANCELLED
