"""Errors of tenancy and access, each with its stable code."""

from __future__ import annotations

from neocloud.core.errors import ApplicationError, Conflict, ValidationFailed


class PermissionDenied(ApplicationError):
    code = "permission_denied"
    http_status = 403


class OrganizationSuspended(ApplicationError):
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
    code = "owner_required"


class LastOwner(Conflict):
    code = "last_owner"
    retryable = False


class SlugTaken(Conflict):
    code = "slug_taken"
    retryable = False


class AlreadyMember(Conflict):
    code = "already_member"
    retryable = False


class InvitationInvalid(ValidationFailed):
    code = "invitation_invalid"


class ScopeNotAllowed(ValidationFailed):
    code = "scope_not_allowed"


class QuotaExceedsOrganization(ValidationFailed):
    code = "quota_exceeds_organization"


class QuotaBelowProjects(Conflict):
    code = "quota_below_project_quota"
    retryable = False


class KeyWiderThanCreator(ValidationFailed):
    """A key makes only keys within itself: its scopes, its project, its expiry."""

    code = "key_wider_than_creator"
