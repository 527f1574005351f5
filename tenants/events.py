"""Tenancy events. A user's (``UserRegistered``, ``UserUpdated``) live in the user's stream
(``user/<id>``); every other one in its organization's (``organization/<id>``): the
organization is the aggregate whose invariants (at least one owner, project quotas within the
organization's) one expected version protects."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from events.types import DomainEvent, event_type

ORGANIZATION_STREAM = "organization"
USER_STREAM = "user"


@event_type("tenants.UserRegistered")
class UserRegistered(DomainEvent):
    user_id: UUID
    email: str
    full_name: str
    is_staff: bool
    email_verified: bool = True  # False: signed up, the address unproven yet


@event_type("tenants.UserEmailVerified")
class UserEmailVerified(DomainEvent):
    """The user followed the link mailed to ``email``: the account may act."""

    email: str


@event_type("tenants.UserUpdated")
class UserUpdated(DomainEvent):
    full_name: str
    is_staff: bool
    is_active: bool


@event_type("tenants.OrganizationCreated")
class OrganizationCreated(DomainEvent):
    organization_id: UUID
    name: str
    slug: str
    billing_email: str


@event_type("tenants.OrganizationUpdated")
class OrganizationUpdated(DomainEvent):
    name: str
    billing_email: str


@event_type("tenants.OrganizationSuspended")
class OrganizationSuspended(DomainEvent):
    reason: str


@event_type("tenants.OrganizationReactivated")
class OrganizationReactivated(DomainEvent):
    pass


@event_type("tenants.ProjectCreated")
class ProjectCreated(DomainEvent):
    project_id: UUID
    name: str
    slug: str
    description: str


@event_type("tenants.ProjectUpdated")
class ProjectUpdated(DomainEvent):
    project_id: UUID
    name: str
    description: str


@event_type("tenants.MemberAdded")
class MemberAdded(DomainEvent):
    membership_id: UUID
    user_id: UUID
    role: str
    projects_scope: str
    project_ids: list[UUID]


@event_type("tenants.MemberRoleChanged")
class MemberRoleChanged(DomainEvent):
    membership_id: UUID
    role: str


@event_type("tenants.MemberProjectsChanged")
class MemberProjectsChanged(DomainEvent):
    membership_id: UUID
    projects_scope: str
    project_ids: list[UUID]


@event_type("tenants.MemberRemoved")
class MemberRemoved(DomainEvent):
    membership_id: UUID


@event_type("tenants.InvitationCreated")
class InvitationCreated(DomainEvent):
    invitation_id: UUID
    email: str
    role: str
    projects_scope: str
    project_ids: list[UUID]
    token_hash: str
    invited_by: UUID | None
    expires_at: datetime


@event_type("tenants.InvitationAccepted")
class InvitationAccepted(DomainEvent):
    invitation_id: UUID
    user_id: UUID


@event_type("tenants.InvitationRevoked")
class InvitationRevoked(DomainEvent):
    invitation_id: UUID


@event_type("tenants.ApiKeyCreated")
class ApiKeyCreated(DomainEvent):
    api_key_id: UUID
    user_id: UUID
    project_id: UUID | None
    name: str
    prefix: str
    key_hash: str  # SHA-256 of a 256-bit random secret: safe to keep, useless to reverse
    scopes: list[str]
    expires_at: datetime | None


@event_type("tenants.ApiKeyRevoked")
class ApiKeyRevoked(DomainEvent):
    api_key_id: UUID


@event_type("tenants.QuotaSet")
class QuotaSet(DomainEvent):
    quota_id: UUID
    project_id: UUID | None
    gpu_model: str
    max_gpus: int
    monthly_gpu_hours: int | None


@event_type("tenants.QuotaCleared")
class QuotaCleared(DomainEvent):
    quota_id: UUID


@event_type("tenants.SecretSet")
class SecretSet(DomainEvent):
    """A project secret was created or given a new value. Its name only: the log never holds
    a value, nor anything derived from one (no hash, no version of it)."""

    secret_id: UUID
    project_id: UUID
    name: str


@event_type("tenants.SecretDeleted")
class SecretDeleted(DomainEvent):
    secret_id: UUID
    project_id: UUID
    name: str


# --- SSH keys (issue 32): in the user's stream ---------------------------------------------


@event_type("tenants.SshKeyAdded")
class SshKeyAdded(DomainEvent):
    """A user registered an SSH public key (``public_key``: ``<type> <base64>``, public
    material only); runs of the user's projects that take SSH authorize it."""

    ssh_key_id: UUID
    name: str
    public_key: str
    algorithm: str
    bits: int
    fingerprint: str


@event_type("tenants.SshKeyRemoved")
class SshKeyRemoved(DomainEvent):
    """The key is no longer authorized anywhere (the runs' ``authorized_keys`` follow)."""

    ssh_key_id: UUID
