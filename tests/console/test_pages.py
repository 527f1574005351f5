"""What holds across the console, in Chromium: another organization's workload is a 404 for a
signed-in member, and the pages outside any area (password reset, sign-up) pass axe-core."""

from __future__ import annotations

import pytest
from django.test import override_settings
from playwright.sync_api import Page, expect

from scheduler import services
from tests.builders import Builder, run
from tests.console.conftest import Member, serious_violations, sign_in
from tests.scheduler.conftest import job, ready_fleet

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_member_opening_another_organizations_workload_gets_a_404(
    page: Page, live_server: object, build: Builder, member: Member
) -> None:
    ready_fleet(nodes=1)
    theirs = build.organization("Globex")
    their_job = run(
        services.workload_submit, project=build.project(theirs, "R&D"), spec=job("theirs")
    )
    base = str(live_server)
    sign_in(page, base, member.user.email)
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()

    response = page.goto(f"{base}/workloads/{their_job.pk}")

    assert response is not None
    assert response.status == 404
    assert "Globex" not in page.content()  # nothing of theirs on the page


@override_settings(CONSOLE_SIGNUP_ENABLED=True)
def test_the_pages_outside_the_areas_have_no_serious_accessibility_findings(
    page: Page, live_server: object
) -> None:
    base = str(live_server)
    for path in ("/login", "/password-reset", "/password-reset/sent", "/signup"):
        response = page.goto(f"{base}{path}")
        assert response is not None
        assert response.status == 200, path
        assert serious_violations(page) == [], path
