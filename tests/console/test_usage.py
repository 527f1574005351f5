"""The usage page: the API's figures for the same member and month, as charts' series, a
table and a CSV of the same rows; scoped to the current organization; a bounded number of
queries; and, in Chromium, usage that rises by a real run's GPU-seconds."""

from __future__ import annotations

import csv
import io
import re
import time
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone
from playwright.sync_api import Page, expect

from inventory import services as inventory
from metering.intervals import gpu_hours
from scheduler import services as scheduler
from scheduler import tasks
from scheduler.models import Allocation
from tenants.models import ProjectsScope
from tests.builders import Builder, client_with_key, run
from tests.builders.history import WHOLE, Log, catch_up
from tests.console.conftest import Member, Role, member_of, serious_violations, sign_in
from tests.scheduler.conftest import job, ready_fleet

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

MARCH = {"from": "2025-03-01", "to": "2025-04-01"}


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.fixture
def cluster_id() -> uuid.UUID:
    region = run(inventory.region_define, slug="eu-west", name="EU West")
    return run(inventory.cluster_define, region=region, slug="eu-west-1", name="EU 1").pk  # type: ignore[no-any-return]


def _used(log: Log, start: str, minutes: int, gpus: int, gpu_model: str = "h100") -> None:
    workload = log.submit(at(start))
    allocation = log.grant(workload, at(start), [(gpus, WHOLE)], gpu_model=gpu_model)
    log.release(workload, allocation, at(start) + timedelta(minutes=minutes))


def _table(html: str) -> list[list[str]]:
    body = html.split('id="nc-usage-table"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", body, re.S)[1:]  # past the header
    return [
        [
            re.sub(r"<[^>]+>", "", cell).strip()
            for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)
        ]
        for row in rows
    ]


def test_the_month_shows_the_apis_figures_as_charts_a_table_and_the_same_csv(
    build: Builder, member: Member, cluster_id: uuid.UUID
) -> None:
    inference = build.project(member.organization, "Inference")
    training = Log(member.project, cluster_id)
    _used(training, "2025-03-10T10:00:00", 30, 2)  # 1 GPU-hour
    _used(training, "2025-03-10T12:00:00", 6, 1, gpu_model="l4")  # 0.1
    _used(Log(inference, cluster_id), "2025-03-12T00:00:00", 90, 4)  # 6
    _used(training, "2025-02-27T00:00:00", 60, 8)  # another month
    other = build.organization("Globex")
    _used(Log(build.project(other, "Theirs"), cluster_id), "2025-03-10T10:00:00", 60, 8)
    catch_up()
    _, secret = build.key(member.organization, member.user)
    api = client_with_key(secret)
    page = Client()
    page.force_login(member.user)

    response = page.get("/usage", {"month": "2025-03"})

    assert response.status_code == 200
    grouped = api.get("/api/v1/usage", {"group_by": "day,project,gpu_model", **MARCH}).json()[
        "results"
    ]
    daily = api.get("/api/v1/usage/daily", MARCH).json()["days"]
    names = {str(member.project.pk): "Training", str(inference.pk): "Inference"}
    expected = [
        [
            row["day"],
            names[row["project"]],
            row["gpu_model"],
            gpu_hours(row["milli_gpu_seconds"]),
            row["gpu_seconds"],
        ]
        for row in grouped
    ]
    assert expected == [
        ["2025-03-10", "Training", "h100", "1.000", "3600.000"],
        ["2025-03-10", "Training", "l4", "0.100", "360.000"],
        ["2025-03-12", "Inference", "h100", "6.000", "21600.000"],
    ]
    html = response.content.decode()
    assert _table(html) == expected
    total = sum(day["milli_gpu_seconds"] for day in daily)
    assert total == 25_560_000
    assert '<strong id="nc-usage-gpu-hours">7.100</strong>' in html
    assert '<strong id="nc-usage-gpu-seconds">25560.000</strong>' in html
    chart = response.context["usage"].chart
    assert chart["days"] == [day["day"] for day in daily]
    assert len(chart["days"]) == 31
    by_project = {series["label"]: series["data"] for series in chart["by_project"]}
    assert by_project["Training"][9] == pytest.approx(1.1)
    assert by_project["Inference"][11] == pytest.approx(6.0)
    assert sum(sum(s["data"]) for s in chart["by_model"]) == pytest.approx(7.1)
    assert 'id="nc-usage-data"' in html  # the series, for Chart.js
    assert 'role="img" aria-label="Bar chart of GPU-hours per day' in html

    download = page.get("/usage.csv", {"month": "2025-03"})
    assert download["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(download.content.decode())))
    assert rows[0] == ["day", "project", "gpu_model", "gpu_hours", "gpu_seconds"]
    assert rows[1:] == expected


def test_the_month_defaults_to_the_current_one_and_a_bad_one_says_so(member: Member) -> None:
    client = Client()
    client.force_login(member.user)
    this_month = f"{timezone.now():%Y-%m}"
    assert f'value="{this_month}"' in client.get("/usage").content.decode()
    bad = client.get("/usage", {"month": "March"})
    assert bad.status_code == 400
    assert "Enter a valid date" in bad.content.decode()
    assert client.get("/usage.csv", {"month": "March"}).status_code == 400


def test_a_member_limited_to_a_project_sees_its_usage_only(
    build: Builder, member: Member, cluster_id: uuid.UUID
) -> None:
    inference = build.project(member.organization, "Inference")
    _used(Log(member.project, cluster_id), "2025-03-10T10:00:00", 60, 1)
    _used(Log(inference, cluster_id), "2025-03-10T10:00:00", 60, 2)
    catch_up()
    limited = build.user("limited@acme.test")
    build.member(
        member.organization,
        Role.MEMBER,
        user=limited,
        projects_scope=ProjectsScope.SELECTED,
        project_ids=[inference.pk],
    )
    client = Client()
    client.force_login(limited)
    rows = list(
        csv.reader(io.StringIO(client.get("/usage.csv", {"month": "2025-03"}).content.decode()))
    )
    assert rows[1:] == [["2025-03-10", "Inference", "h100", "2.000", "7200.000"]]


def test_a_project_named_like_a_formula_is_text_in_the_csv(
    build: Builder, member: Member, cluster_id: uuid.UUID
) -> None:
    name = '=HYPERLINK("http://x","y")'
    _used(Log(build.project(member.organization, name), cluster_id), "2025-03-10T10:00:00", 60, 1)
    catch_up()
    client = Client()
    client.force_login(member.user)

    download = client.get("/usage.csv", {"month": "2025-03"})

    rows = list(csv.reader(io.StringIO(download.content.decode())))
    assert rows[1:] == [["2025-03-10", f"'{name}", "h100", "1.000", "3600.000"]]


def test_the_usage_page_costs_the_same_queries_for_few_rows_as_for_many(
    build: Builder, member: Member, cluster_id: uuid.UUID, django_assert_max_num_queries: object
) -> None:
    client = Client()
    client.force_login(member.user)
    log = Log(member.project, cluster_id)
    _used(log, "2025-03-01T00:00:00", 10, 1)
    catch_up()
    with django_assert_max_num_queries(12):  # type: ignore[operator]
        assert client.get("/usage", {"month": "2025-03"}).status_code == 200
    for day in range(2, 29):
        _used(log, f"2025-03-{day:02d}T00:00:00", 10, 1)
        _used(
            Log(build.project(member.organization, f"P{day}"), cluster_id),
            f"2025-03-{day:02d}T01:00:00",
            10,
            2,
        )
    catch_up()
    with django_assert_max_num_queries(12):  # type: ignore[operator]
        response = client.get("/usage", {"month": "2025-03"})
    assert len(response.context["usage"].rows) == 1 + 2 * 27


def test_a_billing_member_has_no_usage_page(build: Builder, member: Member) -> None:
    client = Client()
    client.force_login(member_of(build, member.organization, Role.BILLING, "bills@acme.test"))
    assert client.get("/usage").status_code == 403


@pytest.mark.django_db(transaction=True)
def test_usage_rises_by_a_runs_gpu_seconds(
    page: Page, live_server: object, member: Member, in_process: None
) -> None:
    base = str(live_server)
    ready_fleet(nodes=1)
    catch_up()
    sign_in(page, base, member.user.email)
    page.goto(f"{base}/usage")
    before = Decimal(page.locator("#nc-usage-gpu-seconds").inner_text())
    assert serious_violations(page) == []

    workload = run(scheduler.workload_submit, project=member.project, spec=job("short", gpus=2))
    time.sleep(0.3)
    tasks.tick()
    catch_up()
    allocation = Allocation.objects.get(workload=workload)
    assert allocation.released_at is not None
    micros = (allocation.released_at - allocation.granted_at) // timedelta(microseconds=1)
    milli = allocation.gpu_milli * micros // 1_000_000

    page.reload()
    after = Decimal(page.locator("#nc-usage-gpu-seconds").inner_text())
    assert after - before == Decimal(milli) / 1000
    row = page.locator("#nc-usage-table tbody tr")
    expect(row).to_have_count(1)
    expect(row.locator("td").nth(0)).to_have_text("Training")
    assert page.locator("#nc-chart-project").get_attribute("width")  # Chart.js drew it
    assert serious_violations(page) == []
