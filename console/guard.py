"""Who is asking, in which organization: the console's one guard, the API's scoping
(``Actor.scope``) behind it, so another organization's object is a 404 here too.

The current organization is the session's choice among the user's memberships (the switcher),
else their first; lists and writes are within it, and an object's own page opens for any
organization the user is a member of.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any, TypeVar

from django.contrib.auth.views import redirect_to_login
from django.db.models import Model, QuerySet
from django.http import Http404, HttpRequest, HttpResponse

from tenants.access import Action, Actor
from tenants.actor import request_correlation
from tenants.models import Membership, Organization, User

SESSION_KEY = "console_organization"
# Each area of the console, by the action that opens it.
AREAS: dict[str, Action] = {
    "workloads": Action.WORKLOAD_READ,
    "submit": Action.WORKLOAD_WRITE,
    "usage": Action.WORKLOAD_READ,
    "billing": Action.INVOICE_READ,
    "organization": Action.MEMBER_READ,
}
M = TypeVar("M", bound=Model)


@dataclass(frozen=True)
class Console:
    """What every page knows of its caller."""

    actor: Actor
    user: User
    organization: Organization | None
    role: str | None
    memberships: list[Membership]

    def can(self, action: Action) -> bool:
        """Whether the page may offer ``action`` (a viewer sees no button it cannot use)."""
        return self.organization is not None and self.actor.allowed(action, self.organization)

    @property
    def areas(self) -> frozenset[str]:
        """The console's areas the member's role opens (the navigation shows only those)."""
        return frozenset(area for area, action in AREAS.items() if self.can(action))

    def scoped(self, queryset: QuerySet[M], action: Action) -> QuerySet[M]:
        """The rows the member may see for ``action``, in the current organization."""
        scoped = self.actor.scope(queryset, action)
        if self.organization is None:
            return scoped.none()
        return scoped.filter(organization_id=self.organization.pk)

    def one(self, queryset: QuerySet[M], action: Action, pk: object) -> M:
        """One row the member may see in any of their organizations, or a 404."""
        try:
            wanted = uuid.UUID(str(pk))
        except ValueError as wrong:
            raise Http404 from wrong
        found = self.actor.scope(queryset, action).filter(pk=wanted).first()
        if found is None:
            raise Http404
        return found


class ConsoleRequest(HttpRequest):
    """A request past ``signed_in``: it carries its ``Console``."""

    console: Console


def console_of(request: HttpRequest) -> Console:
    user = request.user
    assert isinstance(user, User)  # noqa: S101 - signed_in made sure
    actor = Actor(user=user, correlation_id=request_correlation(request))
    memberships = list(
        Membership.objects.filter(user=user)
        .select_related("organization")
        .order_by("organization__name")
    )
    chosen = str(request.session.get(SESSION_KEY, ""))
    current = next((m for m in memberships if str(m.organization_id) == chosen), None)
    current = current or (memberships[0] if memberships else None)
    return Console(
        actor=actor,
        user=user,
        organization=current.organization if current else None,
        role=current.role if current else None,
        memberships=memberships,
    )


View = Callable[..., HttpResponse]
V = TypeVar("V", bound=View)


def signed_in(view: V) -> V:
    """The page needs a signed-in, active user; ``request.console`` is their ``Console``."""

    @wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        request.console = console_of(request)  # type: ignore[attr-defined]
        return view(request, *args, **kwargs)

    return guarded  # type: ignore[return-value]


def switch_to(request: HttpRequest, organization_id: uuid.UUID) -> None:
    request.session[SESSION_KEY] = str(organization_id)
