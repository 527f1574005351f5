"""What the organization's pages list, each through ``Console.scoped`` (the API's scoping):
projects, members, pending invitations, API keys. One query per list, however long."""

from __future__ import annotations

from django.db.models import QuerySet
from django.utils import timezone

from console.guard import Console
from tenants import selectors
from tenants.access import Action
from tenants.models import ApiKey, Invitation, Membership, Project


def projects(console: Console) -> QuerySet[Project]:
    """The projects the member sees (all, or those their membership selects)."""
    return console.scoped(Project.objects.all(), Action.PROJECT_READ).order_by("name")


def members(console: Console) -> QuerySet[Membership]:
    return (
        console.scoped(Membership.objects.all(), Action.MEMBER_READ)
        .select_related("user")
        .prefetch_related("projects")
        .order_by("user__email")
    )


def invitations_pending(console: Console) -> QuerySet[Invitation]:
    """Invitations still usable: neither accepted, revoked nor expired (managers only)."""
    return (
        console.scoped(Invitation.objects.all(), Action.MEMBER_MANAGE)
        .filter(accepted_at__isnull=True, revoked_at__isnull=True, expires_at__gt=timezone.now())
        .order_by("-created_at")
    )


def api_keys(console: Console) -> QuerySet[ApiKey]:
    """The member's own keys, and every key of the organization for those who manage keys
    (the API's list), in the current organization."""
    if console.organization is None:
        return ApiKey.objects.none()
    return (
        selectors.api_key_list(actor=console.actor)
        .filter(organization=console.organization)
        .select_related("user", "project")
        .order_by("-created_at")
    )
