"""Tenancy writes. Each service checks the actor's rights, validates against the current
projections, and appends to the organization's stream with the version it read, so a
concurrent change makes the append fail (``StreamConflict``) instead of breaking a rule.

Entry points run services through ``neocloud.core.transactions.atomic_with_retry``; services
re-read (and lock) the organization row, so a retry decides on fresh state.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta

from django.db import IntegrityError
from django.utils import timezone
from django.utils.text import slugify

from events import store
from events.store import NO_STREAM
from events.types import DomainEvent
from neocloud.core.errors import ValidationFailed
from neocloud.core.transactions import row_lock
from tenants import events as ev
from tenants import secrets
from tenants.access import ROLE_SCOPES, Action, Actor
from tenants.errors import (
    AlreadyMember,
    InvitationInvalid,
    KeyWiderThanCreator,
    LastOwner,
    OwnerRequired,
    PermissionDenied,
    QuotaBelowProjects,
    QuotaExceedsOrganization,
    ScopeNotAllowed,
    SlugTaken,
)
from tenants.models import (
    ApiKey,
    Invitation,
    Membership,
    Organization,
    Project,
    ProjectsScope,
    Quota,
    Role,
    Scope,
    User,
)

INVITATION_TTL = timedelta(days=7)


def _append(actor: Actor, organization: Organization, events: Sequence[DomainEvent]) -> None:
    store.append(
        ev.ORGANIZATION_STREAM,
        str(organization.id),
        events,
        expected_version=organization.version,
        metadata=actor.metadata(organization.id),
    )


def _fresh(organization: Organization) -> Organization:
    """The organization as it is now, locked until the transaction ends.

    Writers of one organization queue on its row instead of failing each other's expected
    version; the version check stays as the guarantee. Lock order: this row, then the
    log's append lock (taken by ``store.append``), never the other way round.
    """
    return row_lock(Organization.objects.all()).get(pk=organization.pk)


# --- users -----------------------------------------------------------------------------------


def user_register(
    *,
    actor: Actor,
    email: str,
    full_name: str = "",
    password: str | None = None,
    is_staff: bool = False,
) -> User:
    """A new user. The password goes to the user table only, never into the log."""
    email = User.objects.normalize_email(email).lower()
    if User.objects.filter(email=email).exists():
        raise ValidationFailed("a user with this e-mail exists", fields={"email": ["taken"]})
    user = User.objects.create_user(email, password, full_name=full_name, is_staff=is_staff)
    store.append(
        ev.USER_STREAM,
        str(user.pk),
        [ev.UserRegistered(user_id=user.pk, email=email, full_name=full_name, is_staff=is_staff)],
        expected_version=NO_STREAM,
        metadata=actor.metadata(),
    )
    return user


def user_update(
    *, actor: Actor, user: User, full_name: str, is_staff: bool, is_active: bool
) -> User:
    """Operators change a user's name, operator rights or activity (deactivated: every key
    and session stops working)."""
    actor.require(Action.USER_MANAGE)
    User.objects.filter(pk=user.pk).update(
        full_name=full_name, is_staff=is_staff, is_active=is_active
    )
    store.append(
        ev.USER_STREAM,
        str(user.pk),
        [ev.UserUpdated(full_name=full_name, is_staff=is_staff, is_active=is_active)],
        expected_version=store.ANY,
        metadata=actor.metadata(),
    )
    return User.objects.get(pk=user.pk)


def user_get_or_register(*, actor: Actor, email: str) -> User:
    existing = User.objects.filter(email=email.lower()).first()
    return existing or user_register(actor=actor, email=email)


# --- organizations --------------------------------------------------------------------------


def organization_create(
    *, actor: Actor, name: str, owner: User, billing_email: str = "", slug: str = ""
) -> Organization:
    """Operators create customers; the owner becomes the first member."""
    actor.require(Action.ORGANIZATION_OPERATE)
    slug = slug or _free_slug(slugify(name) or "org")
    if Organization.objects.filter(slug=slug).exists():
        raise SlugTaken(f"slug {slug!r} is taken", fields={"slug": ["taken"]})
    organization_id = uuid.uuid4()
    try:
        store.append(
            ev.ORGANIZATION_STREAM,
            str(organization_id),
            [
                ev.OrganizationCreated(
                    organization_id=organization_id,
                    name=name,
                    slug=slug,
                    billing_email=billing_email or owner.email,
                ),
                ev.MemberAdded(
                    membership_id=uuid.uuid4(),
                    user_id=owner.pk,
                    role=Role.OWNER,
                    projects_scope=ProjectsScope.ALL,
                    project_ids=[],
                ),
            ],
            expected_version=NO_STREAM,
            metadata=actor.metadata(organization_id),
        )
    except IntegrityError as exc:  # a concurrent create took the slug first
        raise SlugTaken(f"slug {slug!r} is taken", fields={"slug": ["taken"]}) from exc
    return Organization.objects.get(pk=organization_id)


def _free_slug(base: str) -> str:
    slug, n = base[:60], 1
    while Organization.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base[:56]}-{n}"
    return slug


def organization_update(
    *,
    actor: Actor,
    organization: Organization,
    name: str | None = None,
    billing_email: str | None = None,
) -> Organization:
    organization = _fresh(organization)
    actor.require(Action.ORGANIZATION_UPDATE, organization)
    _append(
        actor,
        organization,
        [
            ev.OrganizationUpdated(
                name=organization.name if name is None else name,
                billing_email=organization.billing_email
                if billing_email is None
                else billing_email,
            )
        ],
    )
    return Organization.objects.get(pk=organization.pk)


def organization_suspend(*, actor: Actor, organization: Organization, reason: str) -> Organization:
    """Suspended: members still read, nothing new starts."""
    organization = _fresh(organization)
    actor.require(Action.ORGANIZATION_OPERATE, organization)
    if organization.is_active:
        _append(actor, organization, [ev.OrganizationSuspended(reason=reason)])
    return Organization.objects.get(pk=organization.pk)


def organization_reactivate(*, actor: Actor, organization: Organization) -> Organization:
    organization = _fresh(organization)
    actor.require(Action.ORGANIZATION_OPERATE, organization)
    if not organization.is_active:
        _append(actor, organization, [ev.OrganizationReactivated()])
    return Organization.objects.get(pk=organization.pk)


# --- projects ---------------------------------------------------------------------------------


def project_create(
    *, actor: Actor, organization: Organization, name: str, slug: str = "", description: str = ""
) -> Project:
    organization = _fresh(organization)
    actor.require(Action.PROJECT_WRITE, organization)
    slug = slug or slugify(name)[:64] or "project"
    if Project.objects.filter(organization=organization, slug=slug).exists():
        raise SlugTaken(f"project slug {slug!r} is taken", fields={"slug": ["taken"]})
    project_id = uuid.uuid4()
    _append(
        actor,
        organization,
        [ev.ProjectCreated(project_id=project_id, name=name, slug=slug, description=description)],
    )
    return Project.objects.get(pk=project_id)


def project_update(
    *, actor: Actor, project: Project, name: str | None = None, description: str | None = None
) -> Project:
    organization = _fresh(project.organization)
    actor.require(Action.PROJECT_WRITE, organization)
    project = Project.objects.get(pk=project.pk)
    _append(
        actor,
        organization,
        [
            ev.ProjectUpdated(
                project_id=project.pk,
                name=project.name if name is None else name,
                description=project.description if description is None else description,
            )
        ],
    )
    return Project.objects.get(pk=project.pk)


def _check_projects(
    organization: Organization, project_ids: Collection[uuid.UUID]
) -> list[uuid.UUID]:
    found = set(
        Project.objects.filter(organization=organization, pk__in=project_ids).values_list(
            "pk", flat=True
        )
    )
    missing = set(project_ids) - found
    if missing:
        raise ValidationFailed(
            "projects not in this organization", fields={"projects": sorted(map(str, missing))}
        )
    return sorted(found, key=str)


# --- members and invitations -----------------------------------------------------------------


def _check_owner_rights(actor: Actor, organization: Organization, *roles: str) -> None:
    """Only owners (or operators) grant or take away the owner role."""
    if Role.OWNER in roles and not actor.allowed(Action.OWNER_MANAGE, organization):
        raise OwnerRequired("only an owner changes owners")


def _owners(organization: Organization) -> int:
    return Membership.objects.filter(organization=organization, role=Role.OWNER).count()


def invitation_create(
    *,
    actor: Actor,
    organization: Organization,
    email: str,
    role: str,
    projects_scope: str = ProjectsScope.ALL,
    project_ids: Collection[uuid.UUID] = (),
) -> tuple[Invitation, str]:
    """An invitation and its token (shown once; only its hash is kept)."""
    organization = _fresh(organization)
    actor.require(Action.MEMBER_MANAGE, organization)
    _check_owner_rights(actor, organization, role)
    email = User.objects.normalize_email(email).lower()
    if Membership.objects.filter(organization=organization, user__email=email).exists():
        raise AlreadyMember(f"{email} is already a member")
    projects = _check_projects(organization, project_ids)
    token = secrets.new_token()
    invitation_id = uuid.uuid4()
    _append(
        actor,
        organization,
        [
            ev.InvitationCreated(
                invitation_id=invitation_id,
                email=email,
                role=role,
                projects_scope=projects_scope,
                project_ids=projects,
                token_hash=secrets.digest(token),
                invited_by=actor.user.pk if actor.user else None,
                expires_at=timezone.now() + INVITATION_TTL,
            )
        ],
    )
    return Invitation.objects.get(pk=invitation_id), token


def invitation_accept(*, actor: Actor, token: str) -> Membership:
    """The invited user (signed in with the invited e-mail) joins."""
    invitation = Invitation.objects.filter(token_hash=secrets.digest(token)).first()
    if invitation is None or invitation.state != "pending":
        state = invitation.state if invitation else "unknown"
        raise InvitationInvalid(f"invitation is {state}", fields={"token": [state]})
    if actor.user is None or actor.user.email != invitation.email:
        raise InvitationInvalid(
            "this invitation is for another e-mail address", fields={"token": ["other_email"]}
        )
    organization = _fresh(invitation.organization)
    if actor.role_in(organization.id) is not None:
        raise AlreadyMember("you are already a member")
    membership_id = uuid.uuid4()
    _append(
        actor,
        organization,
        [
            ev.InvitationAccepted(invitation_id=invitation.pk, user_id=actor.user.pk),
            ev.MemberAdded(
                membership_id=membership_id,
                user_id=actor.user.pk,
                role=invitation.role,
                projects_scope=invitation.projects_scope,
                project_ids=[uuid.UUID(p) for p in invitation.project_ids],
            ),
        ],
    )
    return Membership.objects.get(pk=membership_id)


def invitation_revoke(*, actor: Actor, invitation: Invitation) -> Invitation:
    organization = _fresh(invitation.organization)
    actor.require(Action.MEMBER_MANAGE, organization)
    if invitation.state == "pending":
        _append(actor, organization, [ev.InvitationRevoked(invitation_id=invitation.pk)])
    return Invitation.objects.get(pk=invitation.pk)


def member_change_role(*, actor: Actor, membership: Membership, role: str) -> Membership:
    organization = _fresh(membership.organization)
    actor.require(Action.MEMBER_MANAGE, organization)
    membership = Membership.objects.get(pk=membership.pk)
    if membership.role == role:
        return membership
    _check_owner_rights(actor, organization, membership.role, role)
    if membership.role == Role.OWNER and _owners(organization) == 1:
        raise LastOwner("an organization keeps at least one owner")
    _append(actor, organization, [ev.MemberRoleChanged(membership_id=membership.pk, role=role)])
    return Membership.objects.get(pk=membership.pk)


def member_set_projects(
    *,
    actor: Actor,
    membership: Membership,
    projects_scope: str,
    project_ids: Collection[uuid.UUID] = (),
) -> Membership:
    organization = _fresh(membership.organization)
    actor.require(Action.MEMBER_MANAGE, organization)
    projects = _check_projects(organization, project_ids)
    _append(
        actor,
        organization,
        [
            ev.MemberProjectsChanged(
                membership_id=membership.pk, projects_scope=projects_scope, project_ids=projects
            )
        ],
    )
    return Membership.objects.get(pk=membership.pk)


def member_remove(*, actor: Actor, membership: Membership) -> None:
    """Managers remove members; anyone may leave (``member.leave``: in a session or with an
    admin key, as for managing their keys). Their keys in the organization die too."""
    organization = _fresh(membership.organization)
    membership = Membership.objects.get(pk=membership.pk)
    leaving = actor.user is not None and actor.user.pk == membership.user_id
    if leaving:
        actor.require(Action.MEMBER_LEAVE, organization)
    else:
        actor.require(Action.MEMBER_MANAGE, organization)
        _check_owner_rights(actor, organization, membership.role)
    if membership.role == Role.OWNER and _owners(organization) == 1:
        raise LastOwner("an organization keeps at least one owner")
    _append(actor, organization, [ev.MemberRemoved(membership_id=membership.pk)])


# --- API keys ---------------------------------------------------------------------------------


def api_key_create(
    *,
    actor: Actor,
    organization: Organization,
    name: str,
    scopes: Collection[str],
    project: Project | None = None,
    expires_at: datetime | None = None,
    user: User | None = None,
) -> tuple[ApiKey, str]:
    """A key for the actor (operators may make one for a member); the secret is returned
    here once and never stored."""
    organization = _fresh(organization)
    actor.require(Action.API_KEY_OWN, organization)
    owner = user or actor.user
    if owner is None:
        raise PermissionDenied("a key belongs to the user who creates it")
    if owner != actor.user:
        actor.require(Action.API_KEY_ISSUE, organization)
    membership = Membership.objects.filter(organization=organization, user=owner).first()
    if membership is None:
        raise PermissionDenied("the key's user is not a member of this organization")
    wanted = set(scopes)
    allowed = ROLE_SCOPES[membership.role]
    if not wanted or not wanted <= allowed:
        raise ScopeNotAllowed(
            f"a {membership.role} may hold keys with scopes {sorted(allowed)}",
            fields={"scopes": sorted(wanted - allowed) or ["empty"]},
        )
    if project is not None and project.organization_id != organization.id:
        raise ValidationFailed("project not in this organization", fields={"project": ["other"]})
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationFailed("expiry is in the past", fields={"expires_at": ["past"]})
    _check_within_key(actor, wanted, project, expires_at)
    prefix, key = secrets.new_api_key()
    api_key_id = uuid.uuid4()
    _append(
        actor,
        organization,
        [
            ev.ApiKeyCreated(
                api_key_id=api_key_id,
                user_id=owner.pk,
                project_id=project.pk if project else None,
                name=name,
                prefix=prefix,
                key_hash=secrets.digest(key),
                scopes=sorted(wanted),
                expires_at=expires_at,
            )
        ],
    )
    return ApiKey.objects.get(pk=api_key_id), key


def _check_within_key(
    actor: Actor, scopes: set[str], project: Project | None, expires_at: datetime | None
) -> None:
    """A key makes only keys no wider than itself, or a stolen project key or a key about to
    expire would buy its holder a lasting organization-wide one. A session is not limited."""
    creator = actor.api_key
    if creator is None:
        return
    fields: dict[str, list[str]] = {}
    beyond = scopes - actor.granted_scopes
    if beyond:
        fields["scopes"] = [f"the creating key lacks {', '.join(sorted(beyond))}"]
    if creator.project_id is not None and (project is None or project.pk != creator.project_id):
        fields["project"] = [f"the creating key is limited to project {creator.project_id}"]
    if creator.expires_at is not None and (expires_at is None or expires_at > creator.expires_at):
        fields["expires_at"] = [
            f"the creating key expires at {creator.expires_at.isoformat()}: no later"
        ]
    if fields:
        raise KeyWiderThanCreator("a key makes no key wider than itself", fields=fields)


def api_key_revoke(*, actor: Actor, api_key: ApiKey) -> ApiKey:
    organization = _fresh(api_key.organization)
    own = actor.user is not None and api_key.user_id == actor.user.pk
    actor.require(Action.API_KEY_OWN if own else Action.API_KEY_MANAGE, organization)
    if api_key.revoked_at is None:
        _append(actor, organization, [ev.ApiKeyRevoked(api_key_id=api_key.pk)])
    return ApiKey.objects.get(pk=api_key.pk)


def api_key_mark_used(api_key: ApiKey) -> None:
    """Telemetry, written in place at most once a minute (not an event: no business fact)."""
    now = timezone.now()
    if api_key.last_used_at is None or now - api_key.last_used_at > timedelta(minutes=1):
        ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)


# --- quotas -----------------------------------------------------------------------------------


def quota_set(
    *,
    actor: Actor,
    organization: Organization,
    gpu_model: str,
    max_gpus: int,
    monthly_gpu_hours: int | None = None,
    project: Project | None = None,
) -> Quota:
    """Set (create or replace) a quota. A project's never exceeds its organization's; an
    organization's is never set below one of its projects'. No quota means no limit."""
    organization = _fresh(organization)
    actor.require(Action.QUOTA_WRITE, organization)
    if project is not None and project.organization_id != organization.id:
        raise ValidationFailed("project not in this organization", fields={"project": ["other"]})
    quotas = Quota.objects.filter(organization=organization, gpu_model=gpu_model)
    if project is not None:
        parent = quotas.filter(project__isnull=True).first()
        if parent is not None:
            _check_within(parent, max_gpus, monthly_gpu_hours)
    else:
        for child in quotas.filter(project__isnull=False).select_related("project"):
            if child.max_gpus > max_gpus or _exceeds(child.monthly_gpu_hours, monthly_gpu_hours):
                raise QuotaBelowProjects(
                    f"project {child.project.slug if child.project else '?'} has a larger"
                    f" {gpu_model} quota; lower it first",
                    details={"project": str(child.project_id), "max_gpus": child.max_gpus},
                )
    existing = quotas.filter(project=project).first()
    quota_id = existing.pk if existing else uuid.uuid4()
    _append(
        actor,
        organization,
        [
            ev.QuotaSet(
                quota_id=quota_id,
                project_id=project.pk if project else None,
                gpu_model=gpu_model,
                max_gpus=max_gpus,
                monthly_gpu_hours=monthly_gpu_hours,
            )
        ],
    )
    return Quota.objects.get(pk=quota_id)


def _exceeds(child: int | None, parent: int | None) -> bool:
    """A monthly budget left unset inherits its organization's, so it never exceeds it."""
    return parent is not None and child is not None and child > parent


def _check_within(parent: Quota, max_gpus: int, monthly_gpu_hours: int | None) -> None:
    fields: dict[str, list[str]] = {}
    if max_gpus > parent.max_gpus:
        fields["max_gpus"] = [f"organization allows {parent.max_gpus}"]
    if _exceeds(monthly_gpu_hours, parent.monthly_gpu_hours):
        fields["monthly_gpu_hours"] = [f"organization allows {parent.monthly_gpu_hours}"]
    if fields:
        raise QuotaExceedsOrganization(
            f"a project's {parent.gpu_model} quota cannot exceed its organization's",
            fields=fields,
        )


def quota_clear(*, actor: Actor, quota: Quota) -> None:
    organization = _fresh(quota.organization)
    actor.require(Action.QUOTA_WRITE, organization)
    _append(actor, organization, [ev.QuotaCleared(quota_id=quota.pk)])


def organization_bootstrap(
    *,
    actor: Actor,
    name: str,
    owner_email: str,
    slug: str,
    billing_email: str,
    project_slug: str,
) -> tuple[Organization, Project, User, str]:
    """A new customer: the organization, its owner, a first project and the owner's first key
    (the secret). All of it or nothing in the caller's transaction: an organization is never
    left without its project or key."""
    owner = user_get_or_register(actor=actor, email=owner_email)
    organization = organization_create(
        actor=actor, name=name, owner=owner, slug=slug, billing_email=billing_email
    )
    project = project_create(
        actor=actor, organization=organization, name=project_slug, slug=project_slug
    )
    _, secret = api_key_create(
        actor=actor, organization=organization, user=owner, name="first key", scopes=list(Scope)
    )
    return organization, project, owner, secret


def operator_bootstrap(
    *,
    actor: Actor,
    email: str,
    full_name: str,
    password: str | None,
    organization_slug: str,
) -> tuple[User, Organization, str]:
    """An operator (a staff user, made or promoted) owning an organization of their own that
    holds their keys, and a new staff key (the secret). A key belongs to a member of an
    organization, so operators need one; an existing organization must be theirs."""
    # Its row before any append (the lock order of neocloud.core.transactions).
    organization = row_lock(Organization.objects.filter(slug=organization_slug)).first()
    user = User.objects.filter(email=email.lower()).first()
    if user is None:
        user = user_register(
            actor=actor, email=email, full_name=full_name, password=password, is_staff=True
        )
    elif not user.is_staff:
        user = user_update(
            actor=actor,
            user=user,
            full_name=full_name or user.full_name,
            is_staff=True,
            is_active=True,
        )
    if organization is None:
        organization = organization_create(
            actor=actor, name=organization_slug, owner=user, slug=organization_slug
        )
    elif not Membership.objects.filter(
        organization=organization, user=user, role=Role.OWNER
    ).exists():
        raise SlugTaken(
            f"organization {organization_slug!r} exists and {email} is not its owner;"
            " name another with --organization",
            fields={"organization": ["taken by another owner"]},
        )
    _, secret = api_key_create(
        actor=actor,
        organization=organization,
        user=user,
        name="operator key",
        scopes=list(Scope),
    )
    return user, organization, secret
