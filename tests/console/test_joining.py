"""Joining: an invitation's link (the invited user accepts; a visitor makes the account and
joins; anyone else is told why not), and self sign-up where the operator switched it on."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from playwright.sync_api import Page, expect

from console.guard import SESSION_KEY
from tenants import services
from tenants.access import Actor
from tenants.models import Invitation, Membership, Organization, ProjectsScope, Role, User
from tests.builders import Builder, run
from tests.console.conftest import PASSWORD, Member, member_of, serious_violations

pytestmark = pytest.mark.django_db


def invite(member: Member, email: str, **kwargs: Any) -> tuple[Invitation, str]:
    return run(  # type: ignore[no-any-return]
        services.invitation_create,
        actor=Actor(user=member.user),
        organization=member.organization,
        email=email,
        role=kwargs.pop("role", Role.MEMBER),
        **kwargs,
    )


def redirected(response: Any) -> str:
    """Where a PRG response sends the browser."""
    assert response.status_code == 302
    return str(response["Location"])


def text(response: Any) -> str:
    return str(response.content.decode())


def account(name: str = "Nia Newcomer", password: str = PASSWORD) -> dict[str, str]:
    return {"full_name": name, "password": password, "password_again": password}


# --- an invitation's link -------------------------------------------------------------------


def test_the_invited_user_signed_in_accepts(build: Builder, member: Member) -> None:
    other = build.organization("Globex")
    user = member_of(build, other, Role.VIEWER, "dev@acme.test")
    invitation, token = invite(
        member,
        "dev@acme.test",
        projects_scope=ProjectsScope.SELECTED,
        project_ids=[member.project.pk],
    )
    client = Client()
    client.force_login(user)

    page = client.get(f"/invitations/{token}")
    assert page.status_code == 200
    assert "Join Acme" in text(page)
    assert "invited as member, signed in as dev@acme.test" in text(page)

    response = client.post(f"/invitations/{token}")

    assert redirected(response) == "/overview"
    joined = Membership.objects.get(organization=member.organization, user=user)
    assert (joined.role, joined.projects_scope) == (Role.MEMBER, ProjectsScope.SELECTED)
    assert list(joined.projects.all()) == [member.project]
    invitation.refresh_from_db()
    assert invitation.accepted_at is not None
    assert client.session[SESSION_KEY] == str(member.organization.pk)  # now the current one
    assert "Welcome to Acme." in text(client.get("/overview"))


def test_a_visitor_makes_the_account_joins_and_is_signed_in(member: Member) -> None:
    _, token = invite(member, "nia@acme.test", role=Role.VIEWER)
    client = Client()
    form = client.get(f"/invitations/{token}")
    assert "Make your account for <strong>nia@acme.test</strong>" in text(form)

    response = client.post(f"/invitations/{token}", account())

    assert redirected(response) == "/overview"
    user = User.objects.get(email="nia@acme.test")
    assert user.full_name == "Nia Newcomer"
    assert user.check_password(PASSWORD)
    assert Membership.objects.get(user=user).role == Role.VIEWER
    assert client.session["_auth_user_id"] == str(user.pk)
    assert client.get("/overview").status_code == 200


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        pytest.param(
            account() | {"password_again": "something else"},
            "The two passwords differ.",
            id="differ",
        ),
        pytest.param(account(password="12345678"), "This password is too common.", id="weak"),
        pytest.param(
            account(password="nia@acme.test1"), "too similar to the email", id="like-the-e-mail"
        ),
        pytest.param(account(name=""), "This field is required.", id="no-name"),
    ],
)
def test_a_bad_account_form_makes_no_one(
    member: Member, fields: dict[str, str], problem: str
) -> None:
    _, token = invite(member, "nia@acme.test")
    response = Client().post(f"/invitations/{token}", fields)
    assert response.status_code == 400
    assert problem in text(response)
    assert not User.objects.filter(email="nia@acme.test").exists()


def test_a_visitor_with_an_account_is_asked_to_sign_in(build: Builder, member: Member) -> None:
    build.user("dev@acme.test")
    _, token = invite(member, "dev@acme.test")
    page = Client().get(f"/invitations/{token}")
    assert page.status_code == 200
    assert f'href="/login?next=/invitations/{token}"' in text(page)
    refused = Client().post(f"/invitations/{token}", account())
    assert "Sign in to accept" in text(refused)
    assert not Membership.objects.filter(user__email="dev@acme.test").exists()


def test_someone_signed_in_with_another_e_mail_is_told_so(build: Builder, member: Member) -> None:
    _, token = invite(member, "dev@acme.test")
    stranger = build.user("stranger@else.test")
    client = Client()
    client.force_login(stranger)
    for response in (client.get(f"/invitations/{token}"), client.post(f"/invitations/{token}")):
        assert response.status_code == 403
        assert "It is for dev@acme.test, and you are signed in as stranger@else.test." in text(
            response
        )
    assert not Membership.objects.filter(user=stranger).exists()


@pytest.mark.parametrize(
    ("make", "status", "says"),
    [
        pytest.param("unknown", 404, "There is no invitation at this address", id="unknown"),
        pytest.param("revoked", 410, "It was revoked", id="revoked"),
        pytest.param("expired", 410, "It has expired.", id="expired"),
        pytest.param("accepted", 410, "It was accepted already", id="accepted"),
    ],
)
def test_an_unusable_link_says_why(
    build: Builder, member: Member, make: str, status: int, says: str
) -> None:
    invitation, token = invite(member, "dev@acme.test")
    if make == "unknown":
        token = "nothing-like-a-token"
    elif make == "revoked":
        run(services.invitation_revoke, invitation=invitation)
    elif make == "expired":
        Invitation.objects.filter(pk=invitation.pk).update(expires_at=timezone.now())  # time passes
    else:
        run(services.invitation_accept, actor=Actor(user=build.user("dev@acme.test")), token=token)
    for response in (
        Client().get(f"/invitations/{token}"),
        Client().post(f"/invitations/{token}", account()),
    ):
        assert response.status_code == status
        assert says in text(response)
    assert User.objects.filter(email="dev@acme.test").count() == (make == "accepted")


# --- self sign-up ---------------------------------------------------------------------------


def test_sign_up_is_not_there_unless_switched_on(settings: Any) -> None:
    settings.CONSOLE_SIGNUP_ENABLED = False
    client = Client()
    assert client.get("/signup").status_code == 404
    fields = account() | {"organization": "Initech", "email_address": "peter@initech.test"}
    assert client.post("/signup", fields).status_code == 404
    assert not User.objects.exists()


def test_sign_up_makes_the_user_the_owner_of_a_new_organization(settings: Any) -> None:
    settings.CONSOLE_SIGNUP_ENABLED = True
    client = Client()
    assert client.get("/signup").status_code == 200

    response = client.post(
        "/signup",
        account("Peter Gibbons")
        | {"organization": "Initech", "email_address": "Peter@Initech.test"},
    )

    assert redirected(response) == "/overview"
    user = User.objects.get(email="peter@initech.test")
    organization = Organization.objects.get(name="Initech")
    assert organization.slug == "initech"
    assert organization.billing_email == "peter@initech.test"
    owner = Membership.objects.get(organization=organization)
    assert (owner.user, owner.role) == (user, Role.OWNER)
    assert client.session["_auth_user_id"] == str(user.pk)
    assert "Welcome to Initech." in text(client.get("/overview"))


def test_sign_up_with_a_taken_e_mail_makes_nothing(settings: Any, member: Member) -> None:
    settings.CONSOLE_SIGNUP_ENABLED = True
    response = Client().post(
        "/signup", account() | {"organization": "Acme Again", "email_address": member.user.email}
    )
    assert response.status_code == 400
    assert "a user with this e-mail exists" in text(response)
    assert Organization.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_visitor_signs_up_in_the_browser(page: Page, live_server: Any, settings: Any) -> None:
    settings.CONSOLE_SIGNUP_ENABLED = True
    base = str(live_server)
    page.goto(f"{base}/invitations/no-such-token")
    expect(page.get_by_role("alert")).to_contain_text("There is no invitation at this address")
    assert serious_violations(page) == []

    page.goto(f"{base}/signup")
    assert serious_violations(page) == []
    page.get_by_label("Organization name").fill("Initech")
    page.get_by_label("Your name").fill("Peter Gibbons")
    page.get_by_label("E-mail").fill("peter@initech.test")
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_label("Password again").fill(PASSWORD)
    page.get_by_role("button", name="Sign up").click()

    expect(page).to_have_url(f"{base}/overview")
    expect(page.get_by_role("status")).to_have_text("Welcome to Initech.")
    page.goto(f"{base}/organization/members")
    expect(page.locator("#nc-members")).to_contain_text("Peter Gibbons")
    expect(page.locator("#nc-members")).to_contain_text("Owner")
    assert serious_violations(page) == []


def test_sign_ups_are_bounded_per_caller_address(settings: Any) -> None:
    settings.CONSOLE_SIGNUP_ENABLED = True
    settings.SIGNUPS_PER_HOUR = 2
    caller = Client(REMOTE_ADDR=f"10.{secrets.randbelow(250)}.{secrets.randbelow(250)}.7")

    def sign_up(n: int) -> int:
        fields = account(f"Visitor {n}") | {
            "organization": f"Org {n} {secrets.token_hex(4)}",
            "email_address": f"visitor-{n}-{secrets.token_hex(4)}@example.test",
        }
        status: int = caller.post("/signup", fields).status_code
        caller.logout()
        return status

    assert [sign_up(n) for n in range(3)] == [302, 302, 429]
    assert Organization.objects.count() == 2
