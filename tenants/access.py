"""Who may do what: the actor of a request, the permission table, and tenant scoping.

Every queryset the API serves goes through ``Actor.scope``: the one place where tenant
isolation is decided. A row of an organization the actor cannot see is simply not there, so
another tenant's object is a 404, never a 403.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar
from uuid import UUID

from django.db.models import Model, Q, QuerySet

from events.store import Metadata
from tenants.errors import EmailUnverified, OrganizationSuspended, PermissionDenied
from tenants.models import (
    ApiKey,
    Membership,
    Organization,
    ProjectsScope,
    Role,
    Scope,
    TenantPath,
    User,
)

M = TypeVar("M", bound=Model)
NOT_LOADED = object()

ALL_ROLES = frozenset(Role)
READERS = frozenset({Role.OWNER, Role.ADMIN, Role.MEMBER, Role.VIEWER})
MANAGERS = frozenset({Role.OWNER, Role.ADMIN})
# No member role: operators (staff) only.
OPERATORS: frozenset[str] = frozenset()
# The widest scopes a key of each role may carry: viewers only ever read; billing members
# read and pay (the one write their role has).
ROLE_SCOPES: dict[str, frozenset[str]] = {
    Role.OWNER: frozenset(Scope),
    Role.ADMIN: frozenset(Scope),
    Role.MEMBER: frozenset({Scope.READ, Scope.WRITE}),
    Role.VIEWER: frozenset({Scope.READ}),
    Role.BILLING: frozenset({Scope.READ, Scope.WRITE}),
}


class Action(enum.Enum):
    """What an actor does; ``PERMISSIONS`` says who may."""

    ORGANIZATION_READ = "organization.read"
    ORGANIZATION_UPDATE = "organization.update"
    ORGANIZATION_OPERATE = "organization.operate"  # create, suspend, reactivate
    PROJECT_READ = "project.read"
    PROJECT_WRITE = "project.write"
    MEMBER_READ = "member.read"
    MEMBER_MANAGE = "member.manage"  # invite, change roles and projects, remove others
    MEMBER_LEAVE = "member.leave"  # remove one's own membership
    OWNER_MANAGE = "owner.manage"  # grant or take away the owner role
    API_KEY_READ = "api_key.read"
    API_KEY_OWN = "api_key.own"  # make and revoke one's own keys
    API_KEY_MANAGE = "api_key.manage"  # revoke any key of the organization
    API_KEY_ISSUE = "api_key.issue"  # make a key for another member
    QUOTA_READ = "quota.read"
    QUOTA_WRITE = "quota.write"
    AUDIT_READ = "audit.read"
    ORDER_READ = "order.read"
    ORDER_WRITE = "order.write"  # place and cancel orders
    ORDER_APPROVE = "order.approve"  # approve and reject orders, set the approval threshold
    WORKLOAD_READ = "workload.read"  # workloads, reservations, queues
    WORKLOAD_WRITE = "workload.write"  # submit and cancel workloads
    INVOICE_READ = "invoice.read"  # invoices, credit notes, the billing account
    INVOICE_PAY = "invoice.pay"  # set the card, pay an invoice
    BILLING_OPERATE = "billing.operate"  # profiles, credits, closing months, corrections
    CATALOG_WRITE = "catalog.write"  # offerings and their prices
    FLEET_READ = "fleet.read"  # clusters, nodes, their topology and capacity
    FLEET_WRITE = "fleet.write"  # GPU models, regions, clusters, racks, nodes
    SCHEDULING_WRITE = "scheduling.write"  # priority classes, queues
    USER_MANAGE = "user.manage"  # names, operator rights, deactivation
    SECRET_READ = "secret.read"  # noqa: S105 - names and times of project secrets, no values
    SECRET_WRITE = "secret.write"  # noqa: S105 - create, set the value of, delete


@dataclass(frozen=True)
class Permission:
    roles: frozenset[str]  # the member roles that may; operators may every action
    scope: str  # the API key scope it needs, operators' keys included
    starts_something: bool = False  # refused while the organization is suspended


# The whole truth of who may do what; docs/reference/permissions.md's table of actions is
# checked against it.
PERMISSIONS: dict[Action, Permission] = {
    Action.ORGANIZATION_READ: Permission(ALL_ROLES, Scope.READ),
    Action.ORGANIZATION_UPDATE: Permission(MANAGERS, Scope.WRITE),
    Action.ORGANIZATION_OPERATE: Permission(OPERATORS, Scope.ADMIN),
    Action.PROJECT_READ: Permission(READERS, Scope.READ),
    Action.PROJECT_WRITE: Permission(MANAGERS, Scope.WRITE, starts_something=True),
    Action.MEMBER_READ: Permission(READERS, Scope.READ),
    Action.MEMBER_MANAGE: Permission(MANAGERS, Scope.ADMIN, starts_something=True),
    # Leaving ends one's keys in the organization: managing oneself, like one's keys.
    Action.MEMBER_LEAVE: Permission(ALL_ROLES, Scope.ADMIN),
    Action.OWNER_MANAGE: Permission(frozenset({Role.OWNER}), Scope.ADMIN),
    Action.API_KEY_READ: Permission(ALL_ROLES, Scope.READ),
    Action.API_KEY_OWN: Permission(ALL_ROLES, Scope.ADMIN),
    Action.API_KEY_MANAGE: Permission(MANAGERS, Scope.ADMIN),
    Action.API_KEY_ISSUE: Permission(OPERATORS, Scope.ADMIN),
    Action.QUOTA_READ: Permission(READERS, Scope.READ),
    Action.QUOTA_WRITE: Permission(OPERATORS, Scope.ADMIN),
    Action.AUDIT_READ: Permission(MANAGERS, Scope.READ),
    Action.ORDER_READ: Permission(READERS | {Role.BILLING}, Scope.READ),
    Action.ORDER_WRITE: Permission(MANAGERS | {Role.MEMBER}, Scope.WRITE, starts_something=True),
    Action.ORDER_APPROVE: Permission(OPERATORS, Scope.ADMIN),
    Action.WORKLOAD_READ: Permission(READERS, Scope.READ),
    Action.WORKLOAD_WRITE: Permission(MANAGERS | {Role.MEMBER}, Scope.WRITE, starts_something=True),
    Action.INVOICE_READ: Permission(MANAGERS | {Role.BILLING}, Scope.READ),
    # Paying moves money: a write. A suspended organization may always pay.
    Action.INVOICE_PAY: Permission(frozenset({Role.OWNER, Role.BILLING}), Scope.WRITE),
    Action.BILLING_OPERATE: Permission(OPERATORS, Scope.ADMIN),
    Action.CATALOG_WRITE: Permission(OPERATORS, Scope.ADMIN),
    Action.FLEET_READ: Permission(OPERATORS, Scope.READ),
    Action.FLEET_WRITE: Permission(OPERATORS, Scope.ADMIN),
    Action.SCHEDULING_WRITE: Permission(OPERATORS, Scope.ADMIN),
    Action.USER_MANAGE: Permission(OPERATORS, Scope.ADMIN),
    Action.SECRET_READ: Permission(MANAGERS, Scope.READ),
    Action.SECRET_WRITE: Permission(MANAGERS, Scope.WRITE),
}

_SCOPE_IMPLIES = {
    Scope.READ: {Scope.READ},
    Scope.WRITE: {Scope.READ, Scope.WRITE},
    Scope.ADMIN: {Scope.READ, Scope.WRITE, Scope.ADMIN},
}


@dataclass
class Actor:
    """The user behind a request, through an API key or a session, or a system component."""

    user: User | None
    api_key: ApiKey | None = None
    system: str | None = None
    # Recorded in the metadata of the events this actor causes.
    correlation_id: str | None = None
    idempotency_key: str | None = None

    @classmethod
    def system_actor(cls, name: str) -> Actor:
        return cls(user=None, system=name)

    @property
    def label(self) -> str:
        """How the log records this actor (``metadata.actor``)."""
        if self.api_key is not None:
            return f"api_key:{self.api_key.prefix}"
        if self.user is not None:
            return f"user:{self.user.pk}"
        return f"system:{self.system or 'neocloud'}"

    def metadata(self, organization_id: UUID | None = None) -> Metadata:
        """What the log records of this actor with the events it causes."""
        return Metadata(
            actor=self.label,
            organization_id=organization_id,
            correlation_id=self.correlation_id,
            idempotency_key=self.idempotency_key,
        )

    @property
    def is_staff(self) -> bool:
        """Operators, and system components (commands, admin on behalf of an operator)."""
        if self.user is None:
            return self.system is not None
        return self.user.is_staff

    @cached_property
    def memberships(self) -> dict[UUID, Membership]:
        """The actor's memberships by organization (through a key: that key's only). Key
        authentication loads the key's membership with the key, saving a query a request."""
        if self.user is None:
            return {}
        if self.api_key is not None:
            loaded = getattr(self.api_key, "membership", NOT_LOADED)
            if loaded is None:
                return {}
            if isinstance(loaded, Membership):
                return {loaded.organization_id: loaded}
            rows = Membership.objects.filter(
                user=self.user, organization_id=self.api_key.organization_id
            )
        else:
            rows = Membership.objects.filter(user=self.user)
        return {m.organization_id: m for m in rows}

    def role_in(self, organization_id: UUID) -> str | None:
        membership = self.memberships.get(organization_id)
        return membership.role if membership else None

    @property
    def granted_scopes(self) -> frozenset[str]:
        """The scopes the actor acts with: its key's and those they imply; every scope
        without a key."""
        if self.api_key is None:
            return frozenset(Scope)
        granted: set[str] = set()
        for held in self.api_key.scopes:
            granted |= _SCOPE_IMPLIES[Scope(held)]
        return frozenset(granted)

    def has_scope(self, scope: str) -> bool:
        return scope in self.granted_scopes

    def allowed(self, action: Action, organization: Organization | None = None) -> bool:
        """Whether the table lets the actor do ``action`` (in ``organization``; without one,
        only operators may)."""
        permission = PERMISSIONS[action]
        if not self.has_scope(permission.scope):
            return False
        if self.is_staff:
            return True
        if organization is None:
            return False
        if self.api_key is not None and self.api_key.organization_id != organization.id:
            return False
        return self.role_in(organization.id) in permission.roles

    def require(
        self, action: Action, organization: Organization | None = None, *, starting: bool = True
    ) -> None:
        """Raise unless the actor may do ``action`` (in ``organization``) now. ``starting``
        False: the action stops something (cancelling work or a reservation), which a
        suspended organization, or a user not yet verified, may always do. A user whose
        e-mail address is not verified may read only: no keys, work, orders, reservations
        or invitations (the one place this is decided, for the API and the console)."""
        if not self.allowed(action, organization):
            where = "in this organization" if organization is not None else "(operators only)"
            raise PermissionDenied(f"not allowed to {action.value} {where}")
        if (
            starting
            and self.user is not None
            and self.user.email_verified_at is None
            and PERMISSIONS[action].scope != Scope.READ
        ):
            raise EmailUnverified(
                f"verify your e-mail address first: follow the link sent to {self.user.email}"
            )
        if (
            starting
            and organization is not None
            and PERMISSIONS[action].starts_something
            and not organization.is_active
        ):
            raise OrganizationSuspended(
                f"organization {organization.slug} is suspended: it can read but start nothing"
            )

    def visible_project_ids(self, organization_id: UUID) -> set[UUID] | None:
        """The projects the actor sees in an organization; None for all of them."""
        if self.api_key is not None and self.api_key.project_id is not None:
            return {self.api_key.project_id}
        if self.is_staff:
            return None
        membership = self.memberships.get(organization_id)
        if membership is None:
            return set()
        if membership.projects_scope == ProjectsScope.SELECTED and membership.role in {
            Role.MEMBER,
            Role.VIEWER,
        }:
            return {p.pk for p in membership.projects.all()}
        return None

    def scope(self, queryset: QuerySet[M], action: Action) -> QuerySet[M]:
        """Only the rows the actor may see for ``action``: the one tenant filter."""
        path: TenantPath = queryset.model.tenancy  # type: ignore[attr-defined]
        permission = PERMISSIONS[action]
        if not self.has_scope(permission.scope):
            return queryset.none()
        if self.is_staff:
            return queryset
        condition = Q(pk__in=[])
        for organization_id, membership in self.memberships.items():
            if membership.role not in permission.roles:
                continue
            visible = self.visible_project_ids(organization_id)
            if visible is None or path.project is None:
                condition |= Q(**{path.organization: organization_id})
            else:
                # Only rows of the projects the actor sees; organization-level rows (no
                # project) stay hidden from a member limited to some projects.
                condition |= Q(**{f"{path.project}__in": visible})
        return queryset.filter(condition)
