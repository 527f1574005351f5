"""Invitations: a manager invites an e-mail address; its user joins with the token.

Concurrency: each write locks the organization's row, then appends (``stream``'s lock
order), so it decides on the invitation and the members as they are now.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import timedelta

from django.utils import timezone

from tenants import events as ev
from tenants import secrets, selectors
from tenants.access import Action, Actor
from tenants.errors import AlreadyMember, InvitationInvalid
from tenants.models import (
    Invitation,
    InvitationState,
    Membership,
    Organization,
    ProjectsScope,
    User,
)
from tenants.services.members import check_owner_rights
from tenants.services.projects import check_projects
from tenants.services.stream import organization_append, organization_locked
from tenants.services.users import user_email_mark_verified

INVITATION_TTL = timedelta(days=7)


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
    organization = organization_locked(organization)
    actor.require(Action.MEMBER_MANAGE, organization)
    check_owner_rights(actor, organization, role)
    email = User.objects.normalize_email(email).lower()
    if selectors.membership_exists(organization=organization, email=email):
        raise AlreadyMember(f"{email} is already a member")
    projects = check_projects(organization, project_ids)
    token = secrets.new_token()
    invitation_id = uuid.uuid4()
    organization_append(
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
    """The invited user (signed in with the invited e-mail) joins; their address counts as
    verified from now on."""
    invitation = selectors.invitation_find(token_hash=secrets.digest(token))
    if invitation is None or invitation.state != InvitationState.PENDING:
        state = invitation.state if invitation else "unknown"
        raise InvitationInvalid(f"invitation is {state}", fields={"token": [state]})
    if actor.user is None or actor.user.email != invitation.email:
        raise InvitationInvalid(
            "this invitation is for another e-mail address", fields={"token": ["other_email"]}
        )
    organization = organization_locked(invitation.organization)
    if actor.role_in(organization.id) is not None:
        raise AlreadyMember("you are already a member")
    membership_id = uuid.uuid4()
    organization_append(
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
    # The link came to the invited address: that proves it (a signed-up user not verified yet).
    user_email_mark_verified(actor=actor, user=actor.user)
    return Membership.objects.get(pk=membership_id)


def invitation_revoke(*, actor: Actor, invitation: Invitation) -> Invitation:
    """A pending invitation stops working; revoking another is a no-op."""
    organization = organization_locked(invitation.organization)
    actor.require(Action.MEMBER_MANAGE, organization)
    if invitation.state == InvitationState.PENDING:
        organization_append(
            actor, organization, [ev.InvitationRevoked(invitation_id=invitation.pk)]
        )
    return Invitation.objects.get(pk=invitation.pk)
