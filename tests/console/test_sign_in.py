"""Signing in and out, the root's redirects, the throttle, password resets, the organization
switcher and the overview: in Chromium where a browser matters, else with Django's client."""

from __future__ import annotations

import re
import secrets
from typing import Any

import pytest
from django.core import mail
from django.test import Client
from playwright.sync_api import Page, expect

from tests.builders import Builder
from tests.console.conftest import Member, Role, member_of, serious_violations, sign_in

pytestmark = pytest.mark.django_db


def test_the_root_sends_strangers_to_sign_in_and_members_to_their_overview(member: Member) -> None:
    client = Client()
    assert client.get("/")["Location"] == "/login"
    assert client.get("/overview")["Location"] == "/login?next=/overview"
    client.force_login(member.user)
    assert client.get("/")["Location"] == "/overview"


@pytest.mark.django_db(transaction=True)
def test_a_member_signs_in_sees_the_overview_and_signs_out(
    page: Page, live_server: object, member: Member
) -> None:
    base = str(live_server)
    sign_in(page, base, member.user.email, "wrong password")
    expect(page.get_by_role("alert")).to_contain_text("enter a correct")
    assert serious_violations(page) == []

    sign_in(page, base, member.user.email)
    expect(page).to_have_url(f"{base}/overview")
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    expect(page.locator("#nc-running")).to_have_text("0")
    expect(page.get_by_text("Acme")).to_be_visible()
    assert serious_violations(page) == []

    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(f"{base}/login")
    page.goto(f"{base}/overview")
    expect(page).to_have_url(re.compile(r"/login\?next=/overview$"))


def test_sign_ins_are_throttled_per_address_and_e_mail(member: Member, settings: object) -> None:
    client = Client()
    for _ in range(4):
        response = client.post("/login", {"username": member.user.email, "password": "nope"})
        assert response.status_code == 200  # the form again, with its error
    fifth = client.post("/login", {"username": member.user.email, "password": "nope"})
    assert fifth.status_code == 429  # locked out from the limit on, for AXES_COOLOFF_TIME
    locked = client.post("/login", {"username": member.user.email, "password": member.password})
    assert locked.status_code == 429
    assert "_auth_user_id" not in client.session


def test_behind_the_proxy_one_callers_failures_lock_out_no_other_caller(
    member: Member, settings: Any
) -> None:
    settings.TRUSTED_PROXY_COUNT = 1  # the documented TLS proxy: every peer is its address
    attacker = Client(REMOTE_ADDR="10.9.9.9", HTTP_X_FORWARDED_FOR="203.0.113.66")
    wrong = {"username": member.user.email, "password": "nope"}
    statuses = [attacker.post("/login", wrong).status_code for _ in range(5)]
    assert statuses == [200, 200, 200, 200, 429]  # the attacker is locked out

    owner = Client(REMOTE_ADDR="10.9.9.9", HTTP_X_FORWARDED_FOR="198.51.100.7")
    signed_in = owner.post("/login", {"username": member.user.email, "password": member.password})

    assert signed_in.status_code == 302
    assert "_auth_user_id" in owner.session


def test_a_password_reset_mails_a_link_that_sets_a_new_password(member: Member) -> None:
    client = Client()
    response = client.post("/password-reset", {"email": member.user.email})
    assert response["Location"] == "/password-reset/sent"
    (message,) = mail.outbox
    link = re.search(r"https?://[^/]+(/password-reset/\S+)", str(message.body))
    assert link is not None
    form = client.get(link[1], follow=True)
    assert form.status_code == 200
    done = client.post(
        form.redirect_chain[-1][0] if form.redirect_chain else link[1],
        {"new_password1": "a brand new password 42", "new_password2": "a brand new password 42"},
    )
    assert done["Location"] == "/password-reset/done"
    signed = Client().post(
        "/login", {"username": member.user.email, "password": "a brand new password 42"}
    )
    assert signed["Location"] == "/overview"


def test_the_switcher_changes_the_organization_among_the_users_own_only(
    build: Builder, member: Member
) -> None:
    other = build.organization("Globex")
    member_of(build, other, Role.VIEWER, "viewer@globex.test")
    build.member(other, Role.MEMBER, user=member.user)
    stranger = build.organization("Initech")
    client = Client()
    client.force_login(member.user)
    assert "Acme" in client.get("/overview").content.decode()

    chosen = f'<option value="{other.pk}" selected>Globex'
    client.post("/organization/switch", {"organization": str(other.pk)})
    assert chosen in client.get("/overview").content.decode()

    client.post("/organization/switch", {"organization": str(stranger.pk)})  # not theirs
    assert chosen in client.get("/overview").content.decode()


def test_the_overview_costs_the_same_queries_however_much_work_there_is(
    member: Member, django_assert_max_num_queries: object
) -> None:
    from scheduler import services
    from tests.builders import run
    from tests.scheduler.conftest import job, ready_fleet

    ready_fleet(nodes=1)
    client = Client()
    client.force_login(member.user)
    # 12 for the work; the money parts add up to 14 (tests/console/test_billing.py): the
    # month's spend rated as its invoice will be (prices, usage, clusters, reservations: 7),
    # open invoices (1), budgets with their usage, alerts and projects (up to 6, none here),
    # the payment check (up to 2). None grows with rows.
    bound = 26
    with django_assert_max_num_queries(bound):  # type: ignore[operator]
        client.get("/overview")
    for i in range(15):
        run(services.workload_submit, project=member.project, spec=job(f"w{i}"))
    with django_assert_max_num_queries(bound):  # type: ignore[operator]
        assert client.get("/overview").status_code == 200


def test_the_sign_in_page_offers_sign_up_only_where_the_operator_allows_it(settings: Any) -> None:
    settings.CONSOLE_SIGNUP_ENABLED = False
    assert "Create an account" not in Client().get("/login").content.decode()
    settings.CONSOLE_SIGNUP_ENABLED = True
    assert 'href="/signup">Create an account' in Client().get("/login").content.decode()


@pytest.mark.parametrize("per", ["caller", "email"])
def test_password_resets_are_bounded_per_caller_and_per_e_mail(
    member: Member, settings: Any, per: str
) -> None:
    settings.PASSWORD_RESETS_PER_HOUR = 2 if per == "caller" else 100
    settings.PASSWORD_RESETS_PER_EMAIL_PER_HOUR = 2 if per == "email" else 100
    address = f"10.{secrets.randbelow(250)}.{secrets.randbelow(250)}"
    member.user.email = f"reset-{secrets.token_hex(4)}@acme.test"
    member.user.save()

    def reset(n: int) -> int:
        caller = f"{address}.{n + 1 if per == 'email' else 1}"
        response = Client(REMOTE_ADDR=caller).post("/password-reset", {"email": member.user.email})
        return response.status_code

    assert [reset(n) for n in range(3)] == [302, 302, 429]
    assert len(mail.outbox) == 2
