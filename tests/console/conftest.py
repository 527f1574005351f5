"""The console in a real browser: Playwright driving the distribution's Chromium (Playwright's
own download cannot be fetched here) against pytest-django's live server, on the test
database. ``make test`` installs Debian's ``chromium`` where it is missing (as root); without
one, the browser tests are skipped, saying so.

(The browser itself is set up in tests/conftest.py.)
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Page

from tenants.models import Organization, Project, Role, User
from tests.builders import Builder
from tests.scheduler.conftest import in_process  # tasks in the live server's threads

PASSWORD = "correct horse battery staple"
SERIOUS = {"serious", "critical"}


@dataclass
class Member:
    user: User
    organization: Organization
    project: Project
    password: str = PASSWORD


@pytest.fixture
def member(build: Builder) -> Member:
    """An owner of a fresh organization with one project, who can sign in."""
    user = build.user("owner@acme.test")
    user.set_password(PASSWORD)
    user.save(update_fields=["password"])
    organization = build.organization("Acme", owner=user)
    return Member(user, organization, build.project(organization, "Training"))


def member_of(build: Builder, organization: Organization, role: str, email: str) -> User:
    """Another member of ``organization`` with ``role``, who can sign in."""
    user = build.user(email)
    user.set_password(PASSWORD)
    user.save(update_fields=["password"])
    build.member(organization, role, user=user)
    return user


def sign_in(page: Page, base_url: str, email: str, password: str = PASSWORD) -> None:
    page.goto(f"{base_url}/login")
    page.get_by_label("E-mail").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()


def serious_violations(page: Page) -> list[str]:
    """axe-core's serious and critical findings on the page, as "rule: where" lines."""
    results = Axe().run(page)
    return [
        f"{v['id']}: {[n['target'] for n in v['nodes']]}"
        for v in results.response["violations"]
        if v.get("impact") in SERIOUS
    ]


__all__ = [
    "Member",
    "Role",
    "in_process",
    "member_of",
    "serious_violations",
    "sign_in",
]
