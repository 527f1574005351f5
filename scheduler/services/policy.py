"""Policy writes: priority classes and projects' queues (cohort, borrowing, weight).

``queue_configure`` locks the project's row, then appends (the log's lock) with the queue
stream's version it read; ``priority_class_define`` only appends. Every cluster's scheduler
is asked for a cycle once a queue's terms commit.
"""

from __future__ import annotations

from django.db import transaction

from events import store
from neocloud.core.errors import ValidationFailed
from neocloud.core.transactions import row_lock
from scheduler import events as ev
from scheduler import triggers
from scheduler.models import PriorityClass, Queue
from scheduler.selectors import default_cohort
from tenants.access import Action, Actor
from tenants.models import Project


def priority_class_define(
    *, actor: Actor, name: str, value: int, preemptible: bool = False, description: str = ""
) -> PriorityClass:
    actor.require(Action.SCHEDULING_WRITE)
    store.append(
        ev.PRIORITY_CLASS_STREAM,
        name,
        [
            ev.PriorityClassDefined(
                name=name, value=value, preemptible=preemptible, description=description
            )
        ],
        expected_version=store.stream_version(ev.PRIORITY_CLASS_STREAM, name),
        metadata=actor.metadata(),
    )
    return PriorityClass.objects.get(name=name)


def queue_configure(
    *,
    actor: Actor,
    project: Project,
    cohort: str | None = None,
    borrowing_limit: int | None = None,
    lending_limit: int | None = None,
    weight: float = 1.0,
) -> Queue:
    """Set a project's queue terms. Its nominal quota is the project's quota; ``cohort``
    defaults to the organization, so its projects lend each other idle quota."""
    actor.require(Action.SCHEDULING_WRITE)
    if weight <= 0:
        raise ValidationFailed("weight must be positive", fields={"weight": ["not_positive"]})
    with transaction.atomic():
        row_lock(Project.objects.all()).get(pk=project.pk)
        store.append(
            ev.QUEUE_STREAM,
            str(project.pk),
            [
                ev.QueueConfigured(
                    project_id=project.pk,
                    organization_id=project.organization_id,
                    cohort=cohort if cohort is not None else default_cohort(project),
                    borrowing_limit=borrowing_limit,
                    lending_limit=lending_limit,
                    weight=weight,
                )
            ],
            expected_version=store.stream_version(ev.QUEUE_STREAM, str(project.pk)),
            metadata=actor.metadata(project.organization_id),
        )
        triggers.policy_changed()
    return Queue.objects.get(pk=project.pk)
