"""The organization's pages: projects, members and roles, invitations, API keys and the audit
feed. Each write is the API's (the same service: the rows behind it say so); a role sees only
the controls it may use, and a forged request is refused with nothing written; another
organization's ids are a 404. The flows a browser matters for run in Chromium at the end."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from events import store
from events.store import NO_STREAM, Metadata
from events.types import DomainEvent, event_type
from tenants import services
from tenants.access import Actor
from tenants.models import ApiKey, Invitation, Membership, Project, ProjectsScope, Scope
from tests.builders import Builder, client_with_key, run
from tests.console.conftest import PASSWORD, Member, Role, member_of, serious_violations, sign_in

pytestmark = pytest.mark.django_db


@event_type("tests.ConsoleUnphrased")
class Unphrased(DomainEvent):
    """An event type the audit feed has no phrase for."""


def signed_in_as(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def redirected(response: Any) -> str:
    """Where a PRG response sends the browser."""
    assert response.status_code == 302
    return str(response["Location"])


def page_of(response: Any) -> str:
    return str(response.content.decode())


def api_projects(secret: str) -> int:
    return int(client_with_key(secret).get("/api/v1/projects").status_code)


# --- projects -------------------------------------------------------------------------------


def test_an_owner_creates_a_project_as_the_api_does(member: Member) -> None:
    client = signed_in_as(member.user)
    assert "Create project" in page_of(client.get("/organization"))

    response = client.post(
        "/organization", {"name": "Inference Fleet", "slug": "", "description": "serving"}
    )

    assert response.status_code == 302
    project = Project.objects.get(organization=member.organization, name="Inference Fleet")
    assert (project.slug, project.description) == ("inference-fleet", "serving")
    listed = page_of(client.get("/organization"))
    assert "Project Inference Fleet created." in listed
    assert "<code>inference-fleet</code>" in listed


def test_a_taken_slug_is_the_forms_error_and_nothing_is_written(member: Member) -> None:
    client = signed_in_as(member.user)
    response = client.post("/organization", {"name": "Again", "slug": "training"})
    assert response.status_code == 409
    assert "project slug &#x27;training&#x27; is taken" in page_of(response)
    assert Project.objects.filter(organization=member.organization).count() == 1


# --- members and invitations ----------------------------------------------------------------


def test_an_invitation_is_mailed_with_its_link_shown_once_then_listed(
    build: Builder, member: Member
) -> None:
    inference = build.project(member.organization, "Inference")
    client = signed_in_as(member.user)
    response = client.post(
        "/organization/members",
        {
            "invite-email": "New@Acme.test",
            "invite-role": Role.MEMBER,
            "invite-projects_scope": ProjectsScope.SELECTED,
            "invite-projects": [str(inference.pk)],
        },
    )

    assert response.status_code == 201
    assert "no-store" in response["Cache-Control"]
    invitation = Invitation.objects.get(organization=member.organization)
    assert (invitation.email, invitation.role, invitation.projects_scope) == (
        "new@acme.test",
        Role.MEMBER,
        ProjectsScope.SELECTED,
    )
    assert invitation.project_ids == [str(inference.pk)]
    shown = re.search(
        r'id="nc-invitation-link"[^>]*>(http://testserver/invitations/[^<]+)<', page_of(response)
    )
    assert shown is not None
    (message,) = mail.outbox
    assert message.to == ["new@acme.test"]
    assert message.subject == "Join Acme on NeoCloud"
    assert shown[1] in message.body
    assert "as member" in message.body

    again = page_of(client.get("/organization/members"))
    assert shown[1] not in again
    assert re.search(r"<td>new@acme.test</td><td>Member</td>", again)


def test_an_invitation_refused_by_the_service_is_the_forms_error(
    build: Builder, member: Member
) -> None:
    member_of(build, member.organization, Role.MEMBER, "dev@acme.test")
    response = signed_in_as(member.user).post(
        "/organization/members",
        {
            "invite-email": "dev@acme.test",
            "invite-role": Role.VIEWER,
            "invite-projects_scope": "all",
        },
    )
    assert response.status_code == 409
    assert "dev@acme.test is already a member" in page_of(response)
    assert Invitation.objects.filter(email="dev@acme.test").count() == 1  # dev's own, accepted
    assert mail.outbox == []


def test_revoking_an_invitation_ends_its_link(member: Member) -> None:
    client = signed_in_as(member.user)
    client.post(
        "/organization/members",
        {
            "invite-email": "late@acme.test",
            "invite-role": Role.VIEWER,
            "invite-projects_scope": "all",
        },
    )
    invitation = Invitation.objects.get()
    link = re.search(r"/invitations/\S+", str(mail.outbox[0].body))
    assert link is not None

    response = client.post(f"/organization/invitations/{invitation.pk}/revoke")

    assert redirected(response) == "/organization/members"
    invitation.refresh_from_db()
    assert invitation.revoked_at is not None
    assert "late@acme.test" not in page_of(client.get("/organization/members")).split("</h2>")[2]
    assert Client().get(link[0]).status_code == 410


def test_an_owner_changes_a_role_and_removes_a_member(build: Builder, member: Member) -> None:
    dev = member_of(build, member.organization, Role.MEMBER, "dev@acme.test")
    membership = Membership.objects.get(user=dev)
    client = signed_in_as(member.user)

    assert redirected(
        client.post(f"/organization/members/{membership.pk}/role", {"role": "admin"})
    ) == ("/organization/members")
    membership.refresh_from_db()
    assert membership.role == Role.ADMIN
    assert "dev@acme.test is now admin." in page_of(client.get("/organization/members"))

    assert client.post(f"/organization/members/{membership.pk}/remove").status_code == 302
    assert not Membership.objects.filter(user=dev).exists()


def test_the_owner_rules_are_the_services(build: Builder, member: Member) -> None:
    admin = member_of(build, member.organization, Role.ADMIN, "admin@acme.test")
    owner = Membership.objects.get(user=member.user)
    client = signed_in_as(admin)
    listed = page_of(client.get("/organization/members"))
    assert f"/organization/members/{owner.pk}/role" not in listed  # no control on an owner
    assert 'value="owner"' not in listed  # nor the owner role to give

    forged = client.post(f"/organization/members/{owner.pk}/role", {"role": "viewer"})
    assert forged.status_code == 403
    assert "only an owner changes owners" in page_of(forged)
    last = signed_in_as(member.user).post(
        f"/organization/members/{owner.pk}/role", {"role": "admin"}
    )
    assert last.status_code == 409
    assert "an organization keeps at least one owner" in page_of(last)
    owner.refresh_from_db()
    assert owner.role == Role.OWNER


# --- API keys -------------------------------------------------------------------------------


def test_a_key_made_here_works_once_shown_and_is_refused_once_revoked(member: Member) -> None:
    client = signed_in_as(member.user)
    response = client.post(
        "/organization/keys",
        {"key-name": "ci", "key-scopes": [Scope.READ, Scope.WRITE], "key-project": ""},
    )

    assert response.status_code == 201
    assert "no-store" in response["Cache-Control"]
    secret = re.search(r'id="nc-secret"[^>]*>([^<]+)<', page_of(response))
    assert secret is not None
    api_key = ApiKey.objects.get(organization=member.organization)
    assert (api_key.name, api_key.user, api_key.scopes, api_key.project) == (
        "ci",
        member.user,
        [Scope.READ, Scope.WRITE],
        None,
    )
    assert secret[1].startswith(f"nc_{api_key.prefix}_")
    assert api_projects(secret[1]) == 200
    listed = page_of(client.get("/organization/keys"))
    assert secret[1] not in listed
    assert f"<code>{api_key.prefix}</code>" in listed

    assert (
        redirected(client.post(f"/organization/keys/{api_key.pk}/revoke")) == "/organization/keys"
    )
    api_key.refresh_from_db()
    assert api_key.revoked_at is not None
    assert api_projects(secret[1]) == 401


def test_a_key_limited_to_a_project(member: Member) -> None:
    signed_in_as(member.user).post(
        "/organization/keys",
        {"key-name": "p", "key-scopes": [Scope.READ], "key-project": str(member.project.pk)},
    )
    assert ApiKey.objects.get().project == member.project


# --- a viewer, and other organizations -------------------------------------------------------


def test_a_viewer_sees_no_control_and_forged_writes_are_refused(
    build: Builder, member: Member
) -> None:
    viewer = member_of(build, member.organization, Role.VIEWER, "viewer@acme.test")
    dev = member_of(build, member.organization, Role.MEMBER, "dev@acme.test")
    dev_membership = Membership.objects.get(user=dev)
    owners_key, _ = build.key(member.organization, member.user)
    pending, _ = invite(member.user, member.organization, "invitee@acme.test")
    client = signed_in_as(viewer)

    projects = page_of(client.get("/organization"))
    members = page_of(client.get("/organization/members"))
    keys = page_of(client.get("/organization/keys"))
    assert "Training" in projects
    assert "New project" not in projects
    assert "dev@acme.test" in members
    for control in ("Set role", "Remove", "Invite someone", "Invitations", "invitee@"):
        assert control not in members
    assert owners_key.prefix not in keys  # only their own keys
    assert 'value="read"' in keys
    assert 'value="write"' not in keys
    assert 'value="admin"' not in keys
    assert "Audit" not in keys
    assert client.get("/organization/audit").status_code == 403

    forged = [
        client.post("/organization", {"name": "Mine"}),
        client.post(
            "/organization/members",
            {
                "invite-email": "x@acme.test",
                "invite-role": "viewer",
                "invite-projects_scope": "all",
            },
        ),
        client.post(f"/organization/members/{dev_membership.pk}/role", {"role": "viewer"}),
        client.post(f"/organization/members/{dev_membership.pk}/remove"),
        client.post(f"/organization/invitations/{pending.pk}/revoke"),
        client.post(f"/organization/keys/{owners_key.pk}/revoke"),
        client.post("/organization/keys", {"key-name": "k", "key-scopes": ["admin"]}),
    ]

    assert [r.status_code for r in forged] == [403, 403, 403, 403, 404, 404, 400]
    assert Project.objects.count() == 1
    pending.refresh_from_db()
    assert pending.state == "pending"
    dev_membership.refresh_from_db()
    assert dev_membership.role == Role.MEMBER
    owners_key.refresh_from_db()
    assert owners_key.revoked_at is None
    assert ApiKey.objects.count() == 1
    assert mail.outbox == []


def invite(by: Any, organization: Any, email: str) -> tuple[Invitation, str]:
    """A pending invitation as viewer, made through the service."""
    return run(  # type: ignore[no-any-return]
        services.invitation_create,
        actor=Actor(user=by),
        organization=organization,
        email=email,
        role=Role.VIEWER,
    )


def test_another_organizations_ids_are_not_found(build: Builder, member: Member) -> None:
    boss = build.user("boss@globex.test")
    globex = build.organization("Globex", owner=boss)
    theirs = Membership.objects.get(user=boss)
    their_key, _ = build.key(globex, boss)
    their_invitation, _ = invite(boss, globex, "x@globex.test")
    client = signed_in_as(member.user)

    responses = [
        client.post(f"/organization/members/{theirs.pk}/role", {"role": "viewer"}),
        client.post(f"/organization/members/{theirs.pk}/remove"),
        client.post(f"/organization/invitations/{their_invitation.pk}/revoke"),
        client.post(f"/organization/keys/{their_key.pk}/revoke"),
        client.post("/organization/keys/not-an-id/revoke"),
    ]

    assert [r.status_code for r in responses] == [404] * 5
    theirs.refresh_from_db()
    assert theirs.role == Role.OWNER
    their_key.refresh_from_db()
    assert their_key.revoked_at is None
    assert Invitation.objects.get(pk=their_invitation.pk).state == "pending"


def test_a_billing_member_has_no_organization_pages(build: Builder, member: Member) -> None:
    billing = member_of(build, member.organization, Role.BILLING, "pay@acme.test")
    client = signed_in_as(billing)
    assert client.get("/organization").status_code == 403
    assert client.get("/organization/members").status_code == 403
    assert client.get("/organization/keys").status_code == 200  # their own keys


# --- the audit feed -------------------------------------------------------------------------


def test_the_audit_feed_tells_who_did_what_when(build: Builder, member: Member) -> None:
    client = signed_in_as(member.user)
    client.post("/organization", {"name": "Inference"})
    client.post(
        "/organization/members",
        {"invite-email": "new@acme.test", "invite-role": "viewer", "invite-projects_scope": "all"},
    )
    client.post("/organization/keys", {"key-name": "ci", "key-scopes": ["read"]})
    key = ApiKey.objects.get()
    client.post(f"/organization/keys/{key.pk}/revoke")
    store.append(
        "tests",
        "unphrased",
        [Unphrased()],
        expected_version=NO_STREAM,
        metadata=Metadata(actor="system:tests", organization_id=member.organization.pk),
    )

    feed = page_of(client.get("/organization/audit"))
    lines = [
        re.sub(r"<[^>]+>", "", line).split("</time>")[-1].strip()
        for line in re.findall(r"<li data-type=[^>]+>(.*?)</li>", feed)
    ]
    lines = [re.sub(r"^.*? UTC|^\d+ \w+ \d{4}, [\d:]+ ", "", line).strip() for line in lines]

    assert lines == [
        "NeoCloud tests.ConsoleUnphrased",
        f"owner@acme.test revoked the API key {key.prefix}",
        f"owner@acme.test created the API key ci ({key.prefix})",
        "owner@acme.test invited new@acme.test as viewer",
        "owner@acme.test created the project Inference",
        "NeoCloud created the project Training",  # the fixture's, by the tests' system actor
        "NeoCloud added owner@acme.test as owner",
        "NeoCloud created the organization Acme",
    ]
    assert f'datetime="{timezone.now():%Y-%m-%d}' in feed
    assert "token_hash" not in feed
    assert key.key_hash not in feed


def test_the_audit_feed_pages_back(member: Member) -> None:
    client = signed_in_as(member.user)
    for i in range(55):
        client.post("/organization", {"name": f"p{i:02}"})
    first = page_of(client.get("/organization/audit"))
    assert first.count("<li data-type=") == 50
    older = re.search(r'href="\?before=(\d+)"', first)
    assert older is not None
    second = page_of(client.get(f"/organization/audit?before={older[1]}"))
    assert second.count("<li data-type=") == 55 + 3 - 50  # the organization, its owner, Training
    assert "?before=" not in second


@pytest.mark.parametrize(
    "before",
    [
        pytest.param("x", id="not-digits"),
        pytest.param("\N{SUPERSCRIPT TWO}", id="a-digit-to-isdigit-not-to-int"),
        pytest.param("9" * 4301, id="more-digits-than-int-reads"),
        pytest.param(str(2**63), id="past-a-bigint"),
    ],
)
def test_a_before_that_is_not_a_position_shows_the_newest_events_and_says_so(
    member: Member, before: str
) -> None:
    client = signed_in_as(member.user)

    response = client.get("/organization/audit", {"before": before})

    assert response.status_code == 400
    newest = client.get("/organization/audit").context["page"].lines
    assert newest
    assert response.context["page"].lines == newest
    assert '<p role="alert">No such place in the feed: the newest events are shown.</p>' in page_of(
        response
    )


# --- query counts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["/organization/members", "/organization/keys", "/organization/audit", "/organization"]
)
def test_a_page_costs_the_same_queries_however_many_rows(
    build: Builder, member: Member, url: str, django_assert_max_num_queries: Any
) -> None:
    client = signed_in_as(member.user)
    limit = 14

    def grow(n: int) -> None:
        for i in range(n):
            user = member_of(build, member.organization, Role.VIEWER, f"u{i}-{n}@acme.test")
            Membership.objects.filter(user=user).update(projects_scope=ProjectsScope.SELECTED)
            build.key(member.organization, member.user)
            build.project(member.organization, f"P{i}-{n}")
            client.post(
                "/organization/members",
                {
                    "invite-email": f"i{i}-{n}@acme.test",
                    "invite-role": "viewer",
                    "invite-projects_scope": "all",
                },
            )

    grow(1)
    with django_assert_max_num_queries(limit):
        assert client.get(url).status_code == 200
    grow(12)
    with django_assert_max_num_queries(limit):
        assert client.get(url).status_code == 200


# --- in a browser ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_key_made_in_the_page_works_and_is_refused_once_revoked(
    page: Page, live_server: Any, member: Member
) -> None:
    base = str(live_server)
    sign_in(page, base, member.user.email)
    page.goto(f"{base}/organization/keys")
    assert serious_violations(page) == []
    page.get_by_label("Name").fill("laptop")
    page.get_by_label("read").check()
    page.get_by_role("button", name="Create key").click()

    secret = page.locator("#nc-secret").inner_text()
    expect(page.get_by_role("button", name="Copy the secret")).to_be_visible()
    assert serious_violations(page) == []
    assert api_projects(secret) == 200

    page.goto(f"{base}/organization/keys")
    expect(page.locator("#nc-secret")).to_have_count(0)
    prefix = ApiKey.objects.get().prefix
    page.get_by_role("button", name=f"Revoke laptop ({prefix})").click()
    expect(page.get_by_role("status")).to_have_text(f"The API key laptop ({prefix}) was revoked.")
    expect(page.locator("#nc-keys")).to_contain_text("revoked")
    assert api_projects(secret) == 401

    page.goto(f"{base}/organization/audit")
    expect(page.locator("#nc-audit li").first).to_contain_text(f"revoked the API key {prefix}")
    assert serious_violations(page) == []


@pytest.mark.django_db(transaction=True)
def test_an_invited_member_joins_in_another_browser_and_sees_the_projects_allowed(
    page: Page, browser: Browser, live_server: Any, build: Builder, member: Member
) -> None:
    base = str(live_server)
    build.project(member.organization, "Inference")
    sign_in(page, base, member.user.email)
    page.goto(f"{base}/organization/members")
    assert serious_violations(page) == []
    page.get_by_label("E-mail").fill("newcomer@acme.test")
    page.get_by_label("Role", exact=True).select_option("member")
    page.get_by_label("Selected").check()
    page.get_by_label("Training").check()
    page.get_by_role("button", name="Send the invitation").click()
    link = page.locator("#nc-invitation-link").inner_text()
    assert link.startswith(f"{base}/invitations/")
    (message,) = mail.outbox
    assert link in message.body
    assert serious_violations(page) == []

    other = browser.new_context()
    try:
        newcomer = other.new_page()
        newcomer.goto(link)
        expect(newcomer.get_by_role("heading", name="Join Acme")).to_be_visible()
        assert serious_violations(newcomer) == []
        newcomer.get_by_label("Your name").fill("Nia Newcomer")
        newcomer.get_by_label("Password", exact=True).fill(PASSWORD)
        newcomer.get_by_label("Password again").fill(PASSWORD)
        newcomer.get_by_role("button", name="Make my account and join").click()
        expect(newcomer).to_have_url(f"{base}/overview")
        expect(newcomer.get_by_role("status")).to_have_text("Welcome to Acme.")

        newcomer.goto(f"{base}/organization")
        expect(newcomer.locator("#nc-projects tbody tr")).to_have_count(1)
        expect(newcomer.locator("#nc-projects")).to_contain_text("Training")
        expect(newcomer.get_by_role("button", name="Create project")).to_have_count(0)
        assert serious_violations(newcomer) == []
    finally:
        other.close()

    joined = Membership.objects.get(user__email="newcomer@acme.test")
    assert (joined.role, joined.projects_scope) == (Role.MEMBER, ProjectsScope.SELECTED)
    assert [p.name for p in joined.projects.all()] == ["Training"]
    assert joined.user.full_name == "Nia Newcomer"
    page.reload()
    expect(page.locator("#nc-members")).to_contain_text("Nia Newcomer")
    expect(page.locator("#nc-members")).to_contain_text("Training")
