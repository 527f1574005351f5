"""Quotas per organization or project and GPU model. No quota means no limit.

Concurrency: setting and clearing lock the organization's row, then append (``stream``'s lock
order), so a project's quota and its organization's are compared as they are now: the
organization's stream version protects the rule that a project's never exceeds it.
"""

from __future__ import annotations

import uuid

from neocloud.core.errors import ValidationFailed
from tenants import events as ev
from tenants import selectors
from tenants.access import Action, Actor
from tenants.errors import QuotaBelowProjects, QuotaExceedsOrganization
from tenants.models import Organization, Project, Quota
from tenants.services.stream import organization_append, organization_locked


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
    organization = organization_locked(organization)
    actor.require(Action.QUOTA_WRITE, organization)
    if project is not None and project.organization_id != organization.id:
        raise ValidationFailed("project not in this organization", fields={"project": ["other"]})
    if project is not None:
        parent = selectors.quota_find(organization=organization, gpu_model=gpu_model, project=None)
        if parent is not None:
            _check_within(parent, max_gpus, monthly_gpu_hours)
    else:
        for child in selectors.project_quotas(organization=organization, gpu_model=gpu_model):
            if child.max_gpus > max_gpus or _exceeds(child.monthly_gpu_hours, monthly_gpu_hours):
                raise QuotaBelowProjects(
                    f"project {child.project.slug if child.project else '?'} has a larger"
                    f" {gpu_model} quota; lower it first",
                    details={"project": str(child.project_id), "max_gpus": child.max_gpus},
                )
    existing = selectors.quota_find(organization=organization, gpu_model=gpu_model, project=project)
    quota_id = existing.pk if existing else uuid.uuid4()
    organization_append(
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
    """Remove a quota: no limit of that model there any more."""
    organization = organization_locked(quota.organization)
    actor.require(Action.QUOTA_WRITE, organization)
    organization_append(actor, organization, [ev.QuotaCleared(quota_id=quota.pk)])
