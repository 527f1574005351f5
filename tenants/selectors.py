"""Tenancy reads: the lookups the services decide on, and what a caller is shown.

Nothing here locks: a service that decides on a read first locks its organization's row
(``tenants.services.stream.organization_locked``), so what it reads here is current.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from uuid import UUID

from django.db.models import Q, QuerySet

from events import selectors as log
from events.models import Event
from tenants.access import Action, Actor
from tenants.models import (
    ApiKey,
    Invitation,
    Membership,
    Organization,
    Project,
    ProjectsScope,
    Quota,
    Role,
    Secret,
    SshKey,
    User,
)
from tenants.secrets import unseal

# --- users ---------------------------------------------------------------------------------


def user_find(*, email: str) -> User | None:
    """The user with this e-mail address (stored in lower case)."""
    return User.objects.filter(email=email.lower()).first()


# --- organizations and projects -------------------------------------------------------------


def users_to_reset(*, email: str) -> list[User]:
    """Who a password reset for ``email`` goes to: the active user with it, whether or not
    they have a password yet (an owner made by ``create_organization`` has none, and sets
    it this way)."""
    return list(User.objects.filter(email__iexact=email, is_active=True))


def organization_slug_taken(slug: str) -> bool:
    return Organization.objects.filter(slug=slug).exists()


def organization_slug_free(base: str) -> str:
    """``base`` (cut to fit), or ``base-2``, ``base-3``… : the first slug no one holds."""
    slug, n = base[:60], 1
    while organization_slug_taken(slug):
        n += 1
        slug = f"{base[:56]}-{n}"
    return slug


def project_slug_taken(*, organization: Organization, slug: str) -> bool:
    return Project.objects.filter(organization=organization, slug=slug).exists()


def project_ids_in(*, organization: Organization, project_ids: Collection[UUID]) -> set[UUID]:
    """Those of ``project_ids`` that are projects of ``organization``."""
    return set(
        Project.objects.filter(organization=organization, pk__in=project_ids).values_list(
            "pk", flat=True
        )
    )


# --- members and invitations ----------------------------------------------------------------


def membership_find(*, organization: Organization, user: User) -> Membership | None:
    return Membership.objects.filter(organization=organization, user=user).first()


def membership_exists(*, organization: Organization, email: str) -> bool:
    """Whether the user with this e-mail address is a member."""
    return Membership.objects.filter(organization=organization, user__email=email).exists()


def owner_count(*, organization: Organization) -> int:
    return Membership.objects.filter(organization=organization, role=Role.OWNER).count()


def invitation_find(*, token_hash: str) -> Invitation | None:
    return Invitation.objects.filter(token_hash=token_hash).first()


def memberships_shown(*, actor: Actor) -> list[Membership]:
    """The actor's memberships (through a key: that key's), by organization slug."""
    return sorted(actor.memberships.values(), key=lambda m: m.organization.slug)


# --- API keys -------------------------------------------------------------------------------


def api_key_for_prefix(prefix: str) -> ApiKey | None:
    """The key with its user, and the user's membership in the key's organization, which
    every authenticated request needs (two plain queries: cheaper to compile than one with
    subqueries)."""
    api_key = ApiKey.objects.select_related("user").filter(prefix=prefix).first()
    if api_key is not None:
        # Read by tenants.access.Actor.memberships (None: the user left the organization).
        api_key.membership = Membership.objects.filter(  # type: ignore[attr-defined]
            organization_id=api_key.organization_id, user_id=api_key.user_id
        ).first()
    return api_key


def api_key_list(*, actor: Actor) -> QuerySet[ApiKey]:
    """The actor's own keys, and every key of the organizations where they manage keys."""
    managed = actor.scope(ApiKey.objects.all(), Action.API_KEY_MANAGE)
    own = actor.scope(ApiKey.objects.filter(user=actor.user), Action.API_KEY_READ)
    return ApiKey.objects.filter(Q(pk__in=managed.values("pk")) | Q(pk__in=own.values("pk")))


# --- quotas ---------------------------------------------------------------------------------


def quota_find(
    *, organization: Organization, gpu_model: str, project: Project | None
) -> Quota | None:
    """The quota of ``gpu_model`` of the project, or (``project`` None) of the organization."""
    return Quota.objects.filter(
        organization=organization, gpu_model=gpu_model, project=project
    ).first()


def project_quotas(*, organization: Organization, gpu_model: str) -> QuerySet[Quota]:
    """The organization's projects' quotas of ``gpu_model``, each with its project."""
    return Quota.objects.filter(
        organization=organization, gpu_model=gpu_model, project__isnull=False
    ).select_related("project")


def quotas_applying(
    *, organization: Organization, project: Project, gpu_models: Sequence[str]
) -> QuerySet[Quota]:
    """The quotas that bind work of ``gpu_models`` in ``project``: its own and its
    organization's."""
    return Quota.objects.filter(organization=organization, gpu_model__in=gpu_models).filter(
        Q(project__isnull=True) | Q(project=project)
    )


# --- the audit feed -------------------------------------------------------------------------


def audit_feed(*, actor: Actor, organization: Organization) -> QuerySet[Event]:
    """Every event recorded for the organization, for those who may read its audit feed
    (the log itself knows no tenant rule: this decides who sees it)."""
    actor.require(Action.AUDIT_READ, organization)
    return log.organization_events(organization_id=organization.pk)


# --- secrets -------------------------------------------------------------------------------


def secret_names_missing(*, project: Project, names: Collection[str]) -> list[str]:
    """Which of ``names`` the project has no secret of, sorted."""
    found = set(
        Secret.objects.filter(project=project, name__in=names).values_list("name", flat=True)
    )
    return sorted(set(names) - found)


def secret_values(project: Project, names: Collection[str]) -> dict[str, str]:
    """The plain values of the project's secrets ``names`` (those that exist), for what
    hands them to a workload. Never for an API response or a log line."""
    rows = Secret.objects.filter(project=project, name__in=names).values_list("name", "sealed")
    return {name: unseal(sealed) for name, sealed in rows}


# --- SSH keys (issue 32) -------------------------------------------------------------------

# Who gets a shell on a project's runs: those who may run work there (a viewer or a billing
# contact reads, and does not log in).
SSH_ROLES = (Role.OWNER, Role.ADMIN, Role.MEMBER)


def ssh_key_list(*, actor: Actor) -> QuerySet[SshKey]:
    """The acting user's own keys (nobody sees another's, operators included)."""
    if actor.user is None:
        return SshKey.objects.none()
    return SshKey.objects.filter(user=actor.user).order_by("created_at", "id")


def ssh_key_projects(*, public_key: str) -> set[UUID]:
    """The projects whose runs ``public_key`` (``<type> <base64>``) may log in to: those of
    every active user who registered it, by the rule of ``ssh_keys_authorized``."""
    users = SshKey.objects.filter(public_key=public_key).values_list("user_id", flat=True)
    memberships = Membership.objects.filter(
        user_id__in=list(users), role__in=SSH_ROLES, user__is_active=True
    ).prefetch_related("projects")
    projects: set[UUID] = set()
    for membership in memberships:
        if membership.projects_scope == ProjectsScope.SELECTED and membership.role == Role.MEMBER:
            projects.update(p.pk for p in membership.projects.all())
        else:
            projects.update(
                Project.objects.filter(organization_id=membership.organization_id).values_list(
                    "pk", flat=True
                )
            )
    return projects


def ssh_keys_authorized(*, project_ids: Collection[UUID]) -> dict[UUID, list[SshKey]]:
    """Per project, the keys of the active users who may run work in it: members of its
    organization with a role that runs work, and the project among theirs. One query."""
    projects = Project.objects.filter(pk__in=project_ids).values_list("pk", "organization_id")
    by_org: dict[UUID, list[UUID]] = {}
    for project_id, organization_id in projects:
        by_org.setdefault(organization_id, []).append(project_id)
    result: dict[UUID, list[SshKey]] = {project_id: [] for project_id in project_ids}
    if not by_org:
        return result
    memberships = Membership.objects.filter(
        organization_id__in=by_org, role__in=SSH_ROLES, user__is_active=True
    ).prefetch_related("projects", "user__ssh_keys")
    for membership in memberships:
        selected = {p.pk for p in membership.projects.all()}
        for project_id in by_org[membership.organization_id]:
            if (
                membership.projects_scope == ProjectsScope.SELECTED
                and membership.role == Role.MEMBER
                and project_id not in selected
            ):
                continue
            result[project_id].extend(membership.user.ssh_keys.all())
    for keys in result.values():
        keys.sort(key=lambda k: (k.fingerprint, str(k.pk)))
    return result
