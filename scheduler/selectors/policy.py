"""Reads of scheduling policy: priority classes, quotas, and each project's queue with its
usage against quota."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db.models import Count, QuerySet

from neocloud.core.errors import ValidationFailed
from scheduler.models import (
    HOLDING_STATUSES,
    WAITING_STATUSES,
    Allocation,
    Queue,
    Workload,
)
from scheduler.selectors.fleet import FleetFacts, fleet_facts
from tenants.models import Project, Quota

# Used when operators have defined none of that name.
BUILTIN_PRIORITY_CLASSES: dict[str, tuple[int, bool]] = {
    "low": (0, True),
    "standard": (100, False),
    "high": (200, False),
    "production": (1000, False),
}


def priority_of(name: str, facts: FleetFacts | None = None) -> tuple[int, bool]:
    """A class's value and whether its work is preemptible by default (operators' classes
    read once per change of them, with the fleet's facts)."""
    defined = (facts or fleet_facts()).priority_classes.get(name)
    if defined is not None:
        return defined
    if name in BUILTIN_PRIORITY_CLASSES:
        return BUILTIN_PRIORITY_CLASSES[name]
    raise ValidationFailed(
        f"unknown priority class {name!r}", fields={"priority_class": ["unknown"]}
    )


def default_cohort(project: Project) -> str:
    """A queue's cohort unless configured: its organization's, so that the organization's
    projects lend each other idle quota."""
    return f"org-{project.organization_id}"


def queues_of(visible: QuerySet[Project]) -> list[dict[str, Any]]:
    """The queue of each of the ``visible`` projects, by organization and slug: its terms,
    depth, running work and usage against quota (a few queries, however many projects)."""
    projects = list(
        Project.objects.filter(pk__in=visible.values("pk")).order_by("organization", "slug")
    )
    ids = [p.pk for p in projects]
    configured = {q.project_id: q for q in Queue.objects.filter(project_id__in=ids)}
    counts: dict[tuple[Any, str], int] = {
        (row["project_id"], row["status"]): row["n"]
        for row in Workload.objects.filter(project_id__in=ids)
        .values("project_id", "status")
        .annotate(n=Count("id"))
    }
    used: dict[Any, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for allocation in Allocation.objects.filter(project_id__in=ids, released_at__isnull=True):
        used[allocation.project_id][allocation.gpu_model] += allocation.gpu_milli / 1000
    quotas = {
        (q.organization_id, q.project_id, q.gpu_model): q.max_gpus
        for q in Quota.objects.filter(organization_id__in={p.organization_id for p in projects})
    }

    def limit(project: Project, model: str) -> int | None:
        own = (project.organization_id, project.pk, model)
        return quotas.get(own, quotas.get((project.organization_id, None, model)))

    result = []
    for project in projects:
        queue = configured.get(project.pk)
        models = sorted(set(used[project.pk]))
        result.append(
            {
                "project": project.pk,
                "organization": project.organization_id,
                "cohort": queue.cohort if queue else default_cohort(project),
                "borrowing_limit": queue.borrowing_limit if queue else None,
                "lending_limit": queue.lending_limit if queue else None,
                "weight": queue.weight if queue else 1.0,
                "depth": sum(counts.get((project.pk, s), 0) for s in WAITING_STATUSES),
                "running": sum(counts.get((project.pk, s), 0) for s in HOLDING_STATUSES),
                "usage": [
                    {
                        "gpu_model": model,
                        "used": used[project.pk][model],
                        "quota": limit(project, model),
                    }
                    for model in models
                ],
            }
        )
    return result
