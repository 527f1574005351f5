"""The rules a user of a GPU cloud expects of tenancy, through the services and the API."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from events import store
from events.replay import projections_replay
from neocloud.core.errors import ValidationFailed
from tenants import events as ev
from tenants import services
from tenants.access import Actor
from tenants.errors import (
    AlreadyMember,
    InvitationInvalid,
    LastOwner,
    OrganizationSuspended,
    OwnerRequired,
    PermissionDenied,
    QuotaBelowProjects,
    QuotaExceedsOrganization,
    ScopeNotAllowed,
)
from tenants.models import (
    ApiKey,
    Invitation,
    InvitationState,
    Membership,
    Organization,
    Project,
    ProjectsScope,
    Quota,
    Role,
    Scope,
    User,
)
from tests.builders import Builder, client_with_key, run

pytestmark = pytest.mark.django_db


@pytest.fixture
def org(build: Builder) -> Organization:
    return build.organization("Acme", owner=build.user("owner@acme.example"))


def owner_user(org: Organization) -> User:
    return Membership.objects.filter(organization=org, role=Role.OWNER).earliest("created_at").user


def owner_of(org: Organization) -> Actor:
    return Actor(user=owner_user(org))


# --- owners -----------------------------------------------------------------------------------


def test_the_last_owner_can_be_neither_demoted_nor_removed(org: Organization) -> None:
    owner = Membership.objects.get(organization=org)

    with pytest.raises(LastOwner):
        run(services.member_change_role, membership=owner, role=Role.ADMIN)
    with pytest.raises(LastOwner):
        run(services.member_remove, actor=Actor(user=owner.user), membership=owner)

    assert Membership.objects.get(pk=owner.pk).role == Role.OWNER


def test_an_owner_may_leave_once_another_owner_exists(build: Builder, org: Organization) -> None:
    first = Membership.objects.get(organization=org)
    second = build.member(org, Role.OWNER)

    run(services.member_remove, actor=Actor(user=first.user), membership=first)

    assert list(Membership.objects.filter(organization=org)) == [second]


@pytest.mark.parametrize(
    ("target_role", "new_role"),
    [(Role.OWNER, Role.ADMIN), (Role.MEMBER, Role.OWNER)],
    ids=["demote-an-owner", "promote-to-owner"],
)
def test_only_owners_change_owners(
    build: Builder, org: Organization, target_role: str, new_role: str
) -> None:
    admin = build.member(org, Role.ADMIN)
    target = build.member(org, target_role)

    with pytest.raises(OwnerRequired):
        run(
            services.member_change_role,
            actor=Actor(user=admin.user),
            membership=target,
            role=new_role,
        )
    run(services.member_change_role, actor=owner_of(org), membership=target, role=new_role)

    assert Membership.objects.get(pk=target.pk).role == new_role


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_owners_demoting_each_other_at_once_leave_one_owner(build: Builder) -> None:
    import threading

    from django.db import connection

    org = build.organization("Duo", owner=build.user("a@duo.example"))
    second = build.member(org, Role.OWNER)
    first = Membership.objects.get(organization=org, user__email="a@duo.example")
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def demote(actor_membership: Membership, target: Membership) -> None:
        barrier.wait()
        try:
            run(
                services.member_change_role,
                actor=Actor(user=actor_membership.user),
                membership=target,
                role=Role.ADMIN,
            )
            outcomes.append("demoted")
        except (LastOwner, OwnerRequired):  # whoever goes second is no owner any more
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [
        threading.Thread(target=demote, args=(first, second)),
        threading.Thread(target=demote, args=(second, first)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(outcomes) == ["demoted", "refused"]
    assert Membership.objects.filter(organization=org, role=Role.OWNER).count() == 1


# --- viewers, billing, suspension ------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "scopes", "allowed"),
    [
        (Role.VIEWER, [Scope.READ], True),
        (Role.VIEWER, [Scope.READ, Scope.WRITE], False),
        (Role.BILLING, [Scope.READ, Scope.WRITE], True),
        (Role.BILLING, [Scope.ADMIN], False),
        (Role.MEMBER, [Scope.READ, Scope.WRITE], True),
        (Role.MEMBER, [Scope.ADMIN], False),
        (Role.ADMIN, [Scope.ADMIN], True),
    ],
)
def test_a_key_never_carries_more_than_its_role_allows(
    build: Builder, org: Organization, role: str, scopes: list[str], allowed: bool
) -> None:
    member = build.member(org, role)

    if allowed:
        api_key, _ = build.key(org, member.user, scopes=scopes)
        assert sorted(api_key.scopes) == sorted(scopes)
    else:
        with pytest.raises(ScopeNotAllowed):
            build.key(org, member.user, scopes=scopes)


def test_a_viewer_reads_but_never_writes(build: Builder, org: Organization) -> None:
    viewer = build.member(org, Role.VIEWER)
    project = build.project(org)
    client = client_with_key(build.key(org, viewer.user)[1])

    read = client.get(f"/api/v1/projects/{project.pk}")
    write = client.patch(f"/api/v1/projects/{project.pk}", {"name": "x"}, format="json")

    assert read.status_code == 200
    assert write.status_code == 403
    assert Project.objects.get(pk=project.pk).name == project.name


def test_billing_sees_the_organization_but_no_projects_or_members(
    build: Builder, org: Organization
) -> None:
    billing = build.member(org, Role.BILLING)
    build.project(org)
    client = client_with_key(build.key(org, billing.user)[1])

    assert client.get(f"/api/v1/organizations/{org.pk}").status_code == 200
    assert client.get("/api/v1/projects").json()["results"] == []
    assert client.get("/api/v1/members").json()["results"] == []


def test_a_suspended_organization_reads_but_starts_nothing(
    build: Builder, org: Organization
) -> None:
    project = build.project(org)
    run(services.organization_suspend, organization=org, reason="unpaid")
    owner = owner_of(org)

    with pytest.raises(OrganizationSuspended):
        run(services.project_create, actor=owner, organization=org, name="New")
    client = client_with_key(build.key(org, owner_user(org))[1])
    response = client.post(
        "/api/v1/projects", {"organization": str(org.pk), "name": "N"}, format="json"
    )

    assert response.status_code == 403
    assert response.json()["error"]["code"] == "organization_suspended"
    assert client.get(f"/api/v1/projects/{project.pk}").status_code == 200
    run(services.organization_reactivate, organization=org)
    assert run(services.project_create, actor=owner, organization=org, name="New").slug == "new"


# --- API keys ---------------------------------------------------------------------------------


def test_a_revoked_key_is_refused_from_the_next_request(build: Builder, org: Organization) -> None:
    owner = owner_of(org)
    api_key, secret = build.key(org, owner_user(org))
    client = client_with_key(secret)
    assert client.get("/api/v1/me").status_code == 200

    run(services.api_key_revoke, actor=owner, api_key=api_key)
    response = client.get("/api/v1/me")

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "authentication_failed"
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_an_expired_key_is_refused(build: Builder, org: Organization) -> None:
    api_key, secret = build.key(
        org, owner_user(org), expires_at=timezone.now() + timedelta(hours=1)
    )
    assert client_with_key(secret).get("/api/v1/me").status_code == 200

    ApiKey.objects.filter(pk=api_key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    assert client_with_key(secret).get("/api/v1/me").status_code == 401


def test_the_secret_is_shown_once_and_only_its_hash_is_stored(
    build: Builder, org: Organization
) -> None:
    client = client_with_key(build.key(org, owner_user(org))[1])

    created = client.post(
        "/api/v1/api-keys",
        {"organization": str(org.pk), "name": "ci", "scopes": ["read"]},
        format="json",
    ).json()
    listed = client.get(f"/api/v1/api-keys/{created['id']}").json()

    assert created["secret"].startswith(f"nc_{created['prefix']}_")
    assert "secret" not in listed
    stored = ApiKey.objects.get(pk=created["id"])
    assert created["secret"] not in (stored.key_hash, stored.prefix)
    assert created["secret"] not in str(store.read_all(limit=10_000))
    assert client_with_key(created["secret"]).get("/api/v1/me").status_code == 200


def test_a_project_key_sees_only_its_project(build: Builder, org: Organization) -> None:
    mine, other = build.project(org, "Mine"), build.project(org, "Other")
    _, secret = build.key(org, owner_user(org), project=mine)

    listed = client_with_key(secret).get("/api/v1/projects").json()["results"]

    assert [p["id"] for p in listed] == [str(mine.pk)]
    assert client_with_key(secret).get(f"/api/v1/projects/{other.pk}").status_code == 404


def test_removing_a_member_revokes_their_keys(build: Builder, org: Organization) -> None:
    member = build.member(org, Role.MEMBER)
    _, secret = build.key(org, member.user)

    run(services.member_remove, actor=owner_of(org), membership=member)

    assert client_with_key(secret).get("/api/v1/me").status_code == 401


# --- project-level membership ------------------------------------------------------------------


def test_a_member_limited_to_some_projects_sees_only_those(
    build: Builder, org: Organization
) -> None:
    visible, hidden = build.project(org, "Visible"), build.project(org, "Hidden")
    member = build.member(
        org, Role.MEMBER, projects_scope=ProjectsScope.SELECTED, project_ids=[visible.pk]
    )
    client = client_with_key(build.key(org, member.user)[1])

    listed = [p["id"] for p in client.get("/api/v1/projects").json()["results"]]

    assert listed == [str(visible.pk)]
    assert client.get(f"/api/v1/projects/{hidden.pk}").status_code == 404
    run(
        services.member_set_projects,
        actor=owner_of(org),
        membership=member,
        projects_scope=ProjectsScope.ALL,
    )
    assert len(client.get("/api/v1/projects").json()["results"]) == 2


# --- invitations -------------------------------------------------------------------------------


def test_an_invitation_is_accepted_once_by_the_invited_address(
    build: Builder, org: Organization
) -> None:
    invitee, stranger = build.user("new@acme.example"), build.user("stranger@else.example")
    invitation, token = run(
        services.invitation_create,
        actor=owner_of(org),
        organization=org,
        email="NEW@acme.example",
        role=Role.VIEWER,
    )

    with pytest.raises(InvitationInvalid, match="another e-mail"):
        run(services.invitation_accept, actor=Actor(user=stranger), token=token)
    membership = run(services.invitation_accept, actor=Actor(user=invitee), token=token)
    with pytest.raises(InvitationInvalid, match="accepted"):
        run(services.invitation_accept, actor=Actor(user=invitee), token=token)

    assert membership.role == Role.VIEWER
    assert Invitation.objects.get(pk=invitation.pk).state == InvitationState.ACCEPTED


def test_expired_and_revoked_invitations_cannot_be_accepted(
    build: Builder, org: Organization
) -> None:
    invitee = build.user("late@acme.example")
    expired, expired_token = run(
        services.invitation_create, organization=org, email=invitee.email, role=Role.MEMBER
    )
    Invitation.objects.filter(pk=expired.pk).update(expires_at=timezone.now())  # time passes
    revoked, revoked_token = run(
        services.invitation_create, organization=org, email=invitee.email, role=Role.MEMBER
    )
    run(services.invitation_revoke, invitation=revoked)

    for token, state in (
        (expired_token, InvitationState.EXPIRED),
        (revoked_token, InvitationState.REVOKED),
    ):
        with pytest.raises(InvitationInvalid, match=state):
            run(services.invitation_accept, actor=Actor(user=invitee), token=token)
    assert not Membership.objects.filter(user=invitee).exists()


def test_a_member_cannot_be_invited_twice(build: Builder, org: Organization) -> None:
    member = build.member(org, Role.MEMBER)

    with pytest.raises(AlreadyMember):
        run(services.invitation_create, organization=org, email=member.user.email, role=Role.ADMIN)


def test_an_admin_cannot_invite_an_owner(build: Builder, org: Organization) -> None:
    admin = build.member(org, Role.ADMIN)

    with pytest.raises(OwnerRequired):
        run(
            services.invitation_create,
            actor=Actor(user=admin.user),
            organization=org,
            email="boss@acme.example",
            role=Role.OWNER,
        )


# --- quotas ------------------------------------------------------------------------------------


def test_a_project_quota_never_exceeds_its_organizations(build: Builder, org: Organization) -> None:
    project = build.project(org)
    run(services.quota_set, organization=org, gpu_model="h100", max_gpus=16, monthly_gpu_hours=1000)

    with pytest.raises(QuotaExceedsOrganization) as too_many:
        run(services.quota_set, organization=org, project=project, gpu_model="h100", max_gpus=17)
    with pytest.raises(QuotaExceedsOrganization):
        run(
            services.quota_set,
            organization=org,
            project=project,
            gpu_model="h100",
            max_gpus=8,
            monthly_gpu_hours=1001,
        )
    quota = run(
        services.quota_set,
        organization=org,
        project=project,
        gpu_model="h100",
        max_gpus=16,
        monthly_gpu_hours=None,
    )

    assert too_many.value.fields == {"max_gpus": ["organization allows 16"]}
    assert (quota.max_gpus, quota.monthly_gpu_hours) == (16, None)


def test_an_organization_quota_never_drops_below_a_projects(
    build: Builder, org: Organization
) -> None:
    project = build.project(org)
    run(services.quota_set, organization=org, gpu_model="a100", max_gpus=8)
    run(services.quota_set, organization=org, project=project, gpu_model="a100", max_gpus=6)

    with pytest.raises(QuotaBelowProjects):
        run(services.quota_set, organization=org, gpu_model="a100", max_gpus=4)

    assert Quota.objects.get(organization=org, project=None).max_gpus == 8


def test_quotas_are_set_by_operators_only(build: Builder, org: Organization) -> None:
    with pytest.raises(PermissionDenied):
        run(services.quota_set, actor=owner_of(org), organization=org, gpu_model="h100", max_gpus=1)
    staff = Actor(user=build.user("ops@neocloud.example", is_staff=True))

    quota = run(services.quota_set, actor=staff, organization=org, gpu_model="h100", max_gpus=1)

    assert quota.max_gpus == 1


def test_a_quota_for_another_organizations_project_is_refused(
    build: Builder, org: Organization
) -> None:
    foreign = build.project(build.organization("Other"))

    with pytest.raises(ValidationFailed):
        run(services.quota_set, organization=org, project=foreign, gpu_model="h100", max_gpus=1)


# --- the log -------------------------------------------------------------------------------------


def test_every_change_is_an_event_with_actor_and_organization(
    build: Builder, org: Organization
) -> None:
    owner = owner_of(org)
    build.project(org)

    events = store.read_stream(ev.ORGANIZATION_STREAM, str(org.pk))

    assert [e.type for e in events] == [
        ev.OrganizationCreated.event_type,
        ev.MemberAdded.event_type,
        ev.ProjectCreated.event_type,
    ]
    assert {e.metadata["organization_id"] for e in events} == {str(org.pk)}
    assert events[0].metadata["actor"] == "system:tests"
    run(services.organization_update, actor=owner, organization=org, name="Acme Inc")
    (last,) = store.read_stream(ev.ORGANIZATION_STREAM, str(org.pk), after_version=3)
    assert last.metadata["actor"] == f"user:{owner_user(org).pk}"


def test_replaying_the_log_rebuilds_the_tenancy_tables(build: Builder, org: Organization) -> None:
    project = build.project(org)
    member = build.member(
        org, Role.MEMBER, projects_scope=ProjectsScope.SELECTED, project_ids=[project.pk]
    )
    build.key(org, member.user)
    run(services.quota_set, organization=org, gpu_model="h100", max_gpus=4)
    run(services.organization_suspend, organization=org, reason="r")

    def snapshot() -> dict[str, object]:
        return {
            "organizations": list(Organization.objects.values().order_by("pk")),
            "projects": list(Project.objects.values().order_by("pk")),
            "members": list(
                Membership.objects.values("pk", "role", "projects_scope", "user").order_by("pk")
            ),
            "member_projects": sorted(
                (str(m.pk), str(p.pk)) for m in Membership.objects.all() for p in m.projects.all()
            ),
            "keys": list(ApiKey.objects.values().order_by("pk")),
            "quotas": list(Quota.objects.values().order_by("pk")),
            "invitations": list(Invitation.objects.values().order_by("pk")),
        }

    live = snapshot()
    projections_replay(names=["tenants.tenancy"])

    assert snapshot() == live


def test_create_organization_prints_a_working_owner_key() -> None:
    out = io.StringIO()
    call_command("create_organization", "Initech", "--owner", "peter@initech.example", stdout=out)

    secret = next(
        line.split()[-1] for line in out.getvalue().splitlines() if line.startswith("API key")
    )
    me = client_with_key(secret).get("/api/v1/me").json()

    assert me["email"] == "peter@initech.example"
    assert me["memberships"][0]["role"] == Role.OWNER
    assert me["memberships"][0]["organization"]["slug"] == "initech"
    assert Scope.ADMIN in me["api_key"]["scopes"]
