"""Members of an organization: their roles, the projects they see, and leaving.

Concurrency: each write locks the organization's row, then appends (``stream``'s lock order),
and counts the owners under that lock: of two concurrent removals of the last two owners the
second sees one owner left and is refused (``LastOwner``).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection

from tenants import events as ev
from tenants import selectors
from tenants.access import Action, Actor
from tenants.errors import LastOwner, OwnerRequired
from tenants.models import Membership, Organization, Role
from tenants.services.projects import check_projects
from tenants.services.stream import organization_append, organization_locked


def check_owner_rights(actor: Actor, organization: Organization, *roles: str) -> None:
    """Only owners (or operators) grant or take away the owner role."""
    if Role.OWNER in roles and not actor.allowed(Action.OWNER_MANAGE, organization):
        raise OwnerRequired("only an owner changes owners")


def _check_not_last_owner(organization: Organization, membership: Membership) -> None:
    if membership.role == Role.OWNER and selectors.owner_count(organization=organization) == 1:
        raise LastOwner("an organization keeps at least one owner")


def member_change_role(*, actor: Actor, membership: Membership, role: str) -> Membership:
    organization = organization_locked(membership.organization)
    actor.require(Action.MEMBER_MANAGE, organization)
    membership = Membership.objects.get(pk=membership.pk)
    if membership.role == role:
        return membership
    check_owner_rights(actor, organization, membership.role, role)
    _check_not_last_owner(organization, membership)
    organization_append(
        actor, organization, [ev.MemberRoleChanged(membership_id=membership.pk, role=role)]
    )
    return Membership.objects.get(pk=membership.pk)


def member_set_projects(
    *,
    actor: Actor,
    membership: Membership,
    projects_scope: str,
    project_ids: Collection[uuid.UUID] = (),
) -> Membership:
    """The projects a member sees: all of them, or those selected (members and viewers)."""
    organization = organization_locked(membership.organization)
    actor.require(Action.MEMBER_MANAGE, organization)
    projects = check_projects(organization, project_ids)
    organization_append(
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
    organization = organization_locked(membership.organization)
    membership = Membership.objects.get(pk=membership.pk)
    leaving = actor.user is not None and actor.user.pk == membership.user_id
    if leaving:
        actor.require(Action.MEMBER_LEAVE, organization)
    else:
        actor.require(Action.MEMBER_MANAGE, organization)
        check_owner_rights(actor, organization, membership.role)
    _check_not_last_owner(organization, membership)
    organization_append(actor, organization, [ev.MemberRemoved(membership_id=membership.pk)])
