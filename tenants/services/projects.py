"""Projects of an organization: events of its stream, written under its row lock (then the
log's append lock), so a project's slug is checked against what is there now."""

from __future__ import annotations

import uuid
from collections.abc import Collection

from django.utils.text import slugify

from neocloud.core.errors import ValidationFailed
from tenants import events as ev
from tenants import selectors
from tenants.access import Action, Actor
from tenants.errors import SlugTaken
from tenants.models import Organization, Project
from tenants.services.stream import organization_append, organization_locked


def project_create(
    *, actor: Actor, organization: Organization, name: str, slug: str = "", description: str = ""
) -> Project:
    organization = organization_locked(organization)
    actor.require(Action.PROJECT_WRITE, organization)
    slug = slug or slugify(name)[:64] or "project"
    if selectors.project_slug_taken(organization=organization, slug=slug):
        raise SlugTaken(f"project slug {slug!r} is taken", fields={"slug": ["taken"]})
    project_id = uuid.uuid4()
    organization_append(
        actor,
        organization,
        [ev.ProjectCreated(project_id=project_id, name=name, slug=slug, description=description)],
    )
    return Project.objects.get(pk=project_id)


def project_update(
    *, actor: Actor, project: Project, name: str | None = None, description: str | None = None
) -> Project:
    """Rename it or change its description; what is not given stays."""
    organization = organization_locked(project.organization)
    actor.require(Action.PROJECT_WRITE, organization)
    project = Project.objects.get(pk=project.pk)
    organization_append(
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


def check_projects(
    organization: Organization, project_ids: Collection[uuid.UUID]
) -> list[uuid.UUID]:
    """``project_ids``, sorted, if every one is a project of ``organization``."""
    found = selectors.project_ids_in(organization=organization, project_ids=project_ids)
    missing = set(project_ids) - found
    if missing:
        raise ValidationFailed(
            "projects not in this organization", fields={"projects": sorted(map(str, missing))}
        )
    return sorted(found, key=str)
