"""Errors of tenancy and access, each with its stable code."""

from __future__ import annotations

from neocloud.core.errors import ApplicationError, Conflict, ValidationFailed


class PermissionDenied(ApplicationError):
    """The caller's role or key scopes do not allow this action."""

    code = "permission_denied"
    http_status = 403


class OrganizationSuspended(ApplicationError):
    """The organization is suspended: it reads, but starts and changes nothing."""

    code = "organization_suspended"
    http_status = 403


class EmailUnverified(ApplicationError):
    """A signed-up user whose address is not verified yet may read, and act only after."""

    code = "email_unverified"
    http_status = 403


class VerificationLinkInvalid(ValidationFailed):
    """A tampered, expired or unknown e-mail verification link."""

    code = "verification_link_invalid"


class OwnerRequired(PermissionDenied):
    """Only an owner adds, removes or changes owners."""

    code = "owner_required"


class LastOwner(Conflict):
    """The change would leave the organization without an owner."""

    code = "last_owner"
    retryable = False


class SlugTaken(Conflict):
    """Another organization or project of this scope has the slug."""

    code = "slug_taken"
    retryable = False


class AlreadyMember(Conflict):
    """The user is already a member of the organization."""

    code = "already_member"
    retryable = False


class InvitationInvalid(ValidationFailed):
    """The invitation is unknown, expired, revoked or already accepted (``fields.token``)."""

    code = "invitation_invalid"


class ScopeNotAllowed(ValidationFailed):
    """A key's scope is not one the role allows or the API knows."""

    code = "scope_not_allowed"


class QuotaExceedsOrganization(ValidationFailed):
    """A project's quota would exceed its organization's."""

    code = "quota_exceeds_organization"


class QuotaBelowProjects(Conflict):
    """The organization's quota would fall below what its projects' quotas add up to."""

    code = "quota_below_project_quota"
    retryable = False


class KeyWiderThanCreator(ValidationFailed):
    """A key makes only keys within itself: its scopes, its project, its expiry."""

    code = "key_wider_than_creator"


class SshKeyInvalid(ValidationFailed):
    """``public_key`` is not an SSH public key we accept (ed25519, ECDSA, RSA of at least
    3072 bits); ``fields.public_key`` says why (``not_a_key``, ``algorithm``, ``too_short``)."""

    code = "ssh_key_invalid"


class SshKeyPrivate(ValidationFailed):
    """A private key was sent as ``public_key``: refused, and its text is kept nowhere."""

    code = "ssh_key_private"


class SshKeyTaken(Conflict):
    """The user has registered this key (the same fingerprint) already."""

    code = "ssh_key_taken"
    retryable = False
