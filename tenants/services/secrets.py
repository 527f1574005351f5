"""Project secrets: values a project's workloads get as variables, kept sealed (``secrets``).

The log records that a secret was set or deleted, by name, never its value; the sealed value
is written to its row beside the event, in the same transaction. Lock order: the
organization's row, then the log's append lock (``stream``), then the secret's row.
"""

from __future__ import annotations

import uuid

from django.db import transaction
from django.utils import timezone

from neocloud.core.errors import ValidationFailed
from neocloud.core.transactions import row_lock
from tenants import events as ev
from tenants.access import Action, Actor
from tenants.errors import PermissionDenied, SlugTaken
from tenants.models import Organization, Project, Secret
from tenants.secrets import MAX_SECRET_VALUE_BYTES, reseal, seal, variable_name_problem
from tenants.services.stream import organization_append, organization_locked


def _writable(actor: Actor, project: Project) -> Organization:
    organization = organization_locked(project.organization)
    actor.require(Action.SECRET_WRITE, organization)
    visible = actor.visible_project_ids(organization.pk)
    if visible is not None and project.pk not in visible:
        raise PermissionDenied("not allowed to set secrets of this project")
    return organization


def _check_value(value: str) -> None:
    if len(value.encode()) > MAX_SECRET_VALUE_BYTES:
        raise ValidationFailed(
            f"a secret's value is at most {MAX_SECRET_VALUE_BYTES} bytes",
            fields={"value": ["too_long"]},
        )


def secret_create(*, actor: Actor, project: Project, name: str, value: str) -> Secret:
    organization = _writable(actor, project)
    problem = variable_name_problem(name)
    if problem:
        raise ValidationFailed(problem, fields={"name": ["invalid"]})
    _check_value(value)
    if Secret.objects.filter(project=project, name=name).exists():
        raise SlugTaken(f"project has a secret {name!r}", fields={"name": ["taken"]})
    secret_id = uuid.uuid4()
    organization_append(
        actor,
        organization,
        [ev.SecretSet(secret_id=secret_id, project_id=project.pk, name=name)],
    )
    now = timezone.now()
    return Secret.objects.create(
        id=secret_id,
        organization=organization,
        project=project,
        name=name,
        sealed=seal(value),
        created_at=now,
        updated_at=now,
    )


def secret_update(*, actor: Actor, secret: Secret, value: str) -> Secret:
    """A new value; the name stays (a workload refers to it)."""
    organization = _writable(actor, secret.project)
    _check_value(value)
    organization_append(
        actor,
        organization,
        [ev.SecretSet(secret_id=secret.pk, project_id=secret.project_id, name=secret.name)],
    )
    secret = row_lock(Secret.objects.all()).get(pk=secret.pk)
    secret.sealed = seal(value)
    secret.updated_at = timezone.now()
    secret.save(update_fields=["sealed", "updated_at"])
    return secret


def secret_delete(*, actor: Actor, secret: Secret) -> None:
    """Workloads already submitted keep the name; the agent finds no value for it."""
    organization = _writable(actor, secret.project)
    organization_append(
        actor,
        organization,
        [ev.SecretDeleted(secret_id=secret.pk, project_id=secret.project_id, name=secret.name)],
    )
    Secret.objects.filter(pk=secret.pk).delete()


def secrets_reseal(batch: int = 500) -> int:
    """Seal every value again with the first of ``SECRETS_KEYS`` (after a new key is put
    first); how many. Each batch is one transaction holding its rows' locks; the values do not
    change, so no event is recorded."""
    done = 0
    last: uuid.UUID | None = None
    while True:
        with transaction.atomic():
            rows = row_lock(Secret.objects.order_by("id"))
            if last is not None:
                rows = rows.filter(id__gt=last)
            page = list(rows[:batch])
            for secret in page:
                secret.sealed = reseal(secret.sealed)
            Secret.objects.bulk_update(page, ["sealed"])
        if not page:
            return done
        done += len(page)
        last = page[-1].pk
