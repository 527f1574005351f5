"""The organization's audit feed in words: who did what, when. The feed is the API's
(``tenants.selectors.audit_feed``: managers only), its data redacted the same way
(``events.selectors.audit_data``); each event becomes a sentence from its type's phrase, with
the ids it names replaced by names, looked up once per page (one query per kind of id), so a
page costs the same queries however many events it shows."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Model

from console.guard import Console
from events import selectors as log
from events.models import Event
from scheduler.models import Workload
from tenants import selectors
from tenants.models import ApiKey, Invitation, Membership, Project, User

PAGE = 50
SOMEONE = "someone"

# An event type's phrase: its data's fields and the names looked up for its ids (``user``,
# ``member``, ``project``, ``invitation``, ``api_key``, ``workload``) fill the braces.
PHRASES: dict[str, str] = {
    "tenants.OrganizationCreated": "created the organization {name}",
    "tenants.OrganizationUpdated": "set the organization's name to {name} and its billing"
    " e-mail to {billing_email}",
    "tenants.OrganizationSuspended": "suspended the organization ({reason})",
    "tenants.OrganizationReactivated": "reactivated the organization",
    "tenants.ProjectCreated": "created the project {name}",
    "tenants.ProjectUpdated": "updated the project {name}",
    "tenants.MemberAdded": "added {user} as {role}",
    "tenants.MemberRoleChanged": "made {member} {role}",
    "tenants.MemberProjectsChanged": "changed which projects {member} sees ({projects_scope})",
    "tenants.MemberRemoved": "removed {member} from the organization",
    "tenants.InvitationCreated": "invited {email} as {role}",
    "tenants.InvitationAccepted": "accepted the invitation for {invitation}",
    "tenants.InvitationRevoked": "revoked the invitation for {invitation}",
    "tenants.ApiKeyCreated": "created the API key {name} ({prefix})",
    "tenants.ApiKeyRevoked": "revoked the API key {api_key}",
    "tenants.QuotaSet": "set the quota of {gpu_model} to {max_gpus} GPUs",
    "tenants.QuotaCleared": "cleared a quota",
    "tenants.SecretSet": "set the secret {name} of the project {project}",
    "tenants.SecretDeleted": "deleted the secret {name} of the project {project}",
    "scheduler.WorkloadSubmitted": "submitted the workload {name} in the project {project}",
    "scheduler.WorkloadCancelRequested": "asked to cancel the workload {workload}",
    "scheduler.WorkloadAdmitted": "admitted the workload {workload}",
    "scheduler.AllocationGranted": "granted GPUs to the workload {workload}",
    "scheduler.WorkloadPreempted": "preempted the workload {workload} ({reason})",
    "scheduler.WorkloadProvisioning": "started provisioning the workload {workload}",
    "scheduler.WorkloadRunning": "started the workload {workload}",
    "scheduler.AllocationReleased": "released the GPUs of the workload {workload} ({reason})",
    "scheduler.WorkloadCancelled": "cancelled the workload {workload}",
    "scheduler.ReservationCreated": "reserved {gpus} {gpu_model} GPUs in the project {project}",
    "scheduler.ReservationCancelled": "cancelled a reservation ({reason})",
    "billing.InvoiceDrafted": "drafted the invoice {number} for {period}",
    "billing.InvoiceFinalized": "finalized an invoice",
    "billing.InvoicePaid": "recorded an invoice as paid",
    "billing.InvoicePaymentFailed": "could not collect an invoice ({message})",
    "billing.InvoiceVoided": "voided an invoice ({reason})",
    "billing.CreditNoteIssued": "issued the credit note {number} ({reason})",
    "billing.CreditGranted": "granted a {kind} credit ({reason})",
    "billing.PaymentMethodSet": "set the payment card ({brand})",
    "metering.BudgetSet": "set a budget",
    "metering.BudgetCleared": "cleared a budget",
    "metering.BudgetThresholdReached": "noted a budget {threshold_percent}% used in {month}",
    "orders.OrderSubmitted": "ordered {quantity} of {offering}",
    "orders.OrderApproved": "approved an order",
    "orders.OrderRejected": "rejected an order ({reason})",
    "orders.OrderCancelled": "cancelled an order",
    "orders.OrderFulfilled": "fulfilled an order",
}


@dataclass(frozen=True)
class AuditLine:
    position: int
    who: str
    what: str
    when: datetime
    type: str


@dataclass(frozen=True)
class AuditPage:
    lines: list[AuditLine]
    older: int | None  # the ``before`` of the next page, None at the oldest


class _Filled(dict[str, str]):
    """A phrase's values; a field the event lacks reads as "…" rather than failing."""

    def __missing__(self, key: str) -> str:
        return "…"


@dataclass
class _Names:
    """The names of the ids a page's events refer to, looked up in one query per kind."""

    users: dict[str, str]
    keys: dict[str, str]
    members: dict[str, str]
    projects: dict[str, str]
    invitations: dict[str, str]
    api_keys: dict[str, str]
    workloads: dict[str, str]


def audit_page(console: Console, before: int | None = None) -> AuditPage:
    """A page of the feed, newest first, from just before the position ``before``."""
    assert console.organization is not None  # noqa: S101 - the view checked the right
    feed = selectors.audit_feed(actor=console.actor, organization=console.organization)
    if before is not None:
        feed = feed.filter(position__lt=before)
    events = list(feed.order_by("-position")[: PAGE + 1])
    shown = events[:PAGE]
    names = _names(shown)
    lines = [
        AuditLine(e.position, _who(e, names), _what(e, names), e.recorded_at, e.type) for e in shown
    ]
    return AuditPage(lines, shown[-1].position if len(events) > PAGE else None)


def _ids(values: Iterable[Any]) -> set[uuid.UUID]:
    found = set()
    for value in values:
        try:
            found.add(uuid.UUID(str(value)))
        except ValueError:
            continue
    return found


def _names(events: list[Event]) -> _Names:
    wanted: dict[str, set[Any]] = defaultdict(set)
    for event in events:
        kind, _, ref = str(event.metadata.get("actor", "")).partition(":")
        wanted["actor_" + kind].add(ref)
        for field in ("user_id", "membership_id", "project_id", "invitation_id", "api_key_id"):
            if event.data.get(field):
                wanted[field].add(event.data[field])
        if event.stream_type == "workload":
            wanted["workload"].add(event.stream_id)

    user_ids = _ids(wanted["actor_user"] | wanted["user_id"])
    return _Names(
        users=_lookup(User, "pk", "email", user_ids),
        keys=_lookup(ApiKey, "prefix", "user__email", wanted["actor_api_key"]),
        members=_lookup(Membership, "pk", "user__email", _ids(wanted["membership_id"])),
        projects=_lookup(Project, "pk", "name", _ids(wanted["project_id"])),
        invitations=_lookup(Invitation, "pk", "email", _ids(wanted["invitation_id"])),
        api_keys=_lookup(ApiKey, "pk", "prefix", _ids(wanted["api_key_id"])),
        workloads=_lookup(Workload, "pk", "name", _ids(wanted["workload"])),
    )


def _lookup(model: type[Model], key: str, name: str, wanted: set[Any]) -> dict[str, str]:
    """``key`` -> ``name`` of the rows of ``model`` whose ``key`` is wanted (no query for none)."""
    if not wanted:
        return {}
    rows = model._default_manager.filter(**{f"{key}__in": wanted}).values_list(key, name)
    return {str(k): str(v) for k, v in rows}


def _who(event: Event, names: _Names) -> str:
    kind, _, ref = str(event.metadata.get("actor", "")).partition(":")
    if kind == "user":
        return names.users.get(ref, SOMEONE)
    if kind == "api_key":
        return f"{names.keys.get(ref, SOMEONE)} (API key {ref})"
    return "NeoCloud"


def _what(event: Event, names: _Names) -> str:
    phrase = PHRASES.get(event.type)
    if phrase is None:
        return event.type
    data = log.audit_data(event)
    filled = _Filled({key: str(value) for key, value in data.items()})
    filled.update(
        user=names.users.get(str(data.get("user_id")), "a user"),
        member=names.members.get(str(data.get("membership_id")), "a former member"),
        project=names.projects.get(str(data.get("project_id")), "…"),
        invitation=names.invitations.get(str(data.get("invitation_id")), "…"),
        api_key=names.api_keys.get(str(data.get("api_key_id")), "…"),
        workload=names.workloads.get(event.stream_id, "…"),
    )
    return phrase.format_map(filled)
