"""The console in a real browser: Playwright driving the distribution's Chromium (Playwright's
own download cannot be fetched here) against pytest-django's live server, on the test
database. ``make test`` installs Debian's ``chromium`` where it is missing (as root); without
one, the browser tests are skipped, saying so.

Playwright's sync API keeps an event loop in the test's thread, which Django takes for an
async context; the ORM calls the tests make around the browser are synchronous all the same.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Page

from neocloud.celery import app as celery_app
from scheduler import scheduling
from tenants.models import Organization, Project, Role, User
from tests.builders import Builder

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = os.environ.get("NEOCLOUD_CHROMIUM") or shutil.which("chromium") or ""
# The flags this machine's network needs (no background connections it would refuse).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PASSWORD = "correct horse battery staple"
SERIOUS = {"serious", "critical"}


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    if not CHROMIUM:
        pytest.skip("no chromium here (make test installs Debian's chromium as root)")
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


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


@pytest.fixture
def in_process() -> Iterator[None]:
    """Tasks in the live server's threads, as in the embedded default."""
    conf = celery_app.conf
    saved = conf.task_always_eager, conf.task_eager_propagates
    conf.task_always_eager, conf.task_eager_propagates = True, True
    scheduling.forget()
    yield
    scheduling.forget()
    conf.task_always_eager, conf.task_eager_propagates = saved


__all__ = ["Member", "Role", "member_of", "serious_violations", "sign_in"]
