"""Organizations: operators create, suspend and reactivate customers; managers rename them.

Concurrency: a new organization's stream must not exist (``NO_STREAM``) and its slug is
unique in the table, so of two creates with one slug the second fails (``SlugTaken``). Every
other write locks the organization's row, then appends (``stream``'s lock order).
"""

from __future__ import annotations

import uuid

from django.db import IntegrityError
from django.utils.text import slugify

from events import store
from events.store import NO_STREAM
from tenants import events as ev
from tenants import selectors
from tenants.access import Action, Actor
from tenants.errors import SlugTaken
from tenants.models import Organization, ProjectsScope, Role, User
from tenants.services.stream import organization_append, organization_locked
from tenants.services.users import user_get_or_register


def organization_create(
    *, actor: Actor, name: str, owner: User, billing_email: str = "", slug: str = ""
) -> Organization:
    """Operators create customers; the owner becomes the first member."""
    actor.require(Action.ORGANIZATION_OPERATE)
    slug = slug or selectors.organization_slug_free(slugify(name) or "org")
    if selectors.organization_slug_taken(slug):
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


def organization_create_with_owner(
    *, actor: Actor, name: str, owner_email: str, billing_email: str = "", slug: str = ""
) -> tuple[Organization, User]:
    """A customer and its first owner, named by e-mail (registered if new): the API's and the
    admin's create. In the caller's transaction, so a refused create registers no one."""
    owner = user_get_or_register(actor=actor, email=owner_email)
    organization = organization_create(
        actor=actor, name=name, owner=owner, billing_email=billing_email, slug=slug
    )
    return organization, owner


def organization_update(
    *,
    actor: Actor,
    organization: Organization,
    name: str | None = None,
    billing_email: str | None = None,
) -> Organization:
    """Rename it or change its billing e-mail; what is not given stays."""
    organization = organization_locked(organization)
    actor.require(Action.ORGANIZATION_UPDATE, organization)
    organization_append(
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
    organization = organization_locked(organization)
    actor.require(Action.ORGANIZATION_OPERATE, organization)
    if organization.is_active:
        organization_append(actor, organization, [ev.OrganizationSuspended(reason=reason)])
    return Organization.objects.get(pk=organization.pk)


def organization_reactivate(*, actor: Actor, organization: Organization) -> Organization:
    organization = organization_locked(organization)
    actor.require(Action.ORGANIZATION_OPERATE, organization)
    if not organization.is_active:
        organization_append(actor, organization, [ev.OrganizationReactivated()])
    return Organization.objects.get(pk=organization.pk)
