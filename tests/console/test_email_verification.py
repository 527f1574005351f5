"""A signed-up user verifies their e-mail address by the link mailed to them: until then they
may read but not act (no keys, work, projects or invitations), through the API and the console
alike; the link works signed in or not, a tampered or expired one is refused, new links are
bounded per user, and users who came any other way are verified already."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
from django.core import mail
from django.test import Client

from events.models import Event
from tenants.models import Organization, Role, User
from tests.console.conftest import Member
from tests.console.test_joining import account, invite, redirected, text

pytestmark = pytest.mark.django_db

LINK = re.compile(r"http://testserver/verify-email/(\S+)")


def signed_up(settings: Any, email: str = "peter@initech.test") -> tuple[Client, User, str]:
    """A visitor who signed up (and is signed in), and the token of the link mailed to them."""
    settings.CONSOLE_SIGNUP_ENABLED = True
    client = Client()
    response = client.post(
        "/signup", account("Peter Gibbons") | {"organization": "Initech", "email_address": email}
    )
    assert redirected(response) == "/overview"
    (message,) = [m for m in mail.outbox if m.to == [email]]
    assert message.subject == "Verify your e-mail address on NeoCloud"
    found = LINK.search(str(message.body))
    assert found is not None
    return client, User.objects.get(email=email), found.group(1)


def key_by_api(client: Client, organization: Organization) -> Any:
    return client.post(
        "/api/v1/api-keys",
        {"organization": str(organization.pk), "name": "ci", "scopes": ["read", "write"]},
        content_type="application/json",
    )


def test_until_verified_the_account_reads_but_cannot_act(settings: Any) -> None:
    client, user, token = signed_up(settings)
    organization = Organization.objects.get(name="Initech")
    assert user.email_verified_at is None

    # reading works; acting is refused with its own code, through the API ...
    assert client.get("/api/v1/organizations").status_code == 200
    refused = [
        key_by_api(client, organization),
        client.post(
            "/api/v1/projects",
            {"organization": str(organization.pk), "name": "Research"},
            content_type="application/json",
        ),
        client.post(
            "/api/v1/invitations",
            {"organization": str(organization.pk), "email": "friend@init.test", "role": "member"},
            content_type="application/json",
        ),
    ]
    for response in refused:
        assert response.status_code == 403, response.json()
        assert response.json()["error"]["code"] == "email_unverified"
        assert response.json()["error"]["message"] == (
            "verify your e-mail address first: follow the link sent to peter@initech.test"
        )

    # ... and the console, which says so on every page and offers a new link
    overview = text(client.get("/overview"))
    assert "Verify your e-mail address." in overview
    assert 'action="/verify-email"' in overview
    page = client.post("/organization/keys", {"key-name": "ci", "key-scopes": ["read"]})
    assert page.status_code == 403
    assert "verify your e-mail address first" in text(page)
    assert not user.api_keys.exists()

    # when the user follows the link, signed in
    followed = client.get(f"/verify-email/{token}")

    # then the account acts
    assert redirected(followed) == "/overview"
    overview = text(client.get("/overview"))
    assert "Your address peter@initech.test is verified." in overview
    assert "Verify your e-mail address." not in overview
    assert key_by_api(client, organization).status_code == 201
    assert Event.objects.filter(type="tenants.UserEmailVerified").count() == 1


def test_the_link_works_signed_out_once_and_is_not_logged(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    client, user, token = signed_up(settings)
    client.logout()

    with caplog.at_level(logging.INFO, logger="neocloud.requests"):
        first = Client().get(f"/verify-email/{token}")
        again = Client().get(f"/verify-email/{token}")

    assert first.status_code == again.status_code == 200
    assert "The address peter@initech.test is verified" in text(first)
    user.refresh_from_db()
    assert user.email_verified_at is not None
    assert Event.objects.filter(type="tenants.UserEmailVerified").count() == 1
    paths = [
        str(r.path)  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "neocloud.requests" and "verify-email" in str(r.path)  # type: ignore[attr-defined]
    ]
    assert paths == ["/verify-email/[redacted]"] * 2
    assert all(token not in path for path in paths)
    assert token not in caplog.text


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param("tamper", "this verification link is not valid", id="tampered"),
        pytest.param("expire", "this verification link has expired", id="expired"),
    ],
)
def test_a_tampered_or_expired_link_is_refused(settings: Any, change: str, message: str) -> None:
    client, user, token = signed_up(settings)
    if change == "tamper":
        token = token[:-1] + ("A" if token[-1] != "A" else "B")
    else:
        settings.EMAIL_VERIFICATION_MAX_AGE_S = -1  # every link is older than that

    response = client.get(f"/verify-email/{token}")

    assert response.status_code == 400
    assert message in text(response)
    user.refresh_from_db()
    assert user.email_verified_at is None
    assert not Event.objects.filter(type="tenants.UserEmailVerified").exists()


def test_new_links_are_bounded_per_user(settings: Any) -> None:
    client, _, _ = signed_up(settings)
    settings.EMAIL_VERIFICATIONS_PER_HOUR = 2

    statuses = [client.post("/verify-email").status_code for _ in range(3)]

    assert statuses == [302, 302, 429]
    assert len(mail.outbox) == 3  # the sign-up's and two more
    # every link works: the newest one too
    newest = LINK.search(str(mail.outbox[-1].body))
    assert newest is not None
    assert redirected(client.get(f"/verify-email/{newest.group(1)}")) == "/overview"


def test_users_who_came_by_an_invitation_are_verified(member: Member) -> None:
    _, token = invite(member, "nia@acme.test", role=Role.ADMIN)
    client = Client()

    assert redirected(client.post(f"/invitations/{token}", account())) == "/overview"

    user = User.objects.get(email="nia@acme.test")
    assert user.email_verified_at is not None
    assert member.user.email_verified_at is not None  # made by the builders, as operators do
    assert key_by_api(client, member.organization).status_code == 201
    assert "Verify your e-mail address." not in text(client.get("/overview"))


def test_accepting_an_invitation_mailed_to_a_signed_up_user_verifies_them(
    settings: Any, member: Member
) -> None:
    client, user, _ = signed_up(settings)
    _, token = invite(member, user.email)

    assert redirected(client.post(f"/invitations/{token}")) == "/overview"

    user.refresh_from_db()
    assert user.email_verified_at is not None
    assert key_by_api(client, member.organization).status_code == 201
    assert Event.objects.filter(type="tenants.UserEmailVerified").count() == 1
