"""New customers and operators from the command line (``create_organization``,
``create_operator``): each a composition of the other services, all of it or nothing in the
caller's transaction.

Lock order: ``operator_bootstrap`` locks an existing organization's row before any append
(the lock order of ``neocloud.core.transactions``); the services it calls lock it again,
which the same transaction may.
"""

from __future__ import annotations

from neocloud.core.transactions import row_lock
from tenants import selectors
from tenants.access import Actor
from tenants.errors import SlugTaken
from tenants.models import Organization, Project, Role, Scope, User
from tenants.services.keys import api_key_create
from tenants.services.organizations import organization_create, organization_create_with_owner
from tenants.services.projects import project_create
from tenants.services.users import user_register, user_update


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
    organization, owner = organization_create_with_owner(
        actor=actor, name=name, owner_email=owner_email, slug=slug, billing_email=billing_email
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
    user = selectors.user_find(email=email)
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
    elif not _owns(user, organization):
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


def _owns(user: User, organization: Organization) -> bool:
    membership = selectors.membership_find(organization=organization, user=user)
    return membership is not None and membership.role == Role.OWNER
