"""Builders of tenancy state, through the services (rows are projections of events)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rest_framework.test import APIClient

from neocloud.core.transactions import atomic_with_retry
from tenants import services
from tenants.access import Actor
from tenants.models import ApiKey, Membership, Organization, Project, Role, Scope, User

SYSTEM = Actor.system_actor("tests")
ROLE_KEY_SCOPES = {
    Role.OWNER: [Scope.READ, Scope.WRITE, Scope.ADMIN],
    Role.ADMIN: [Scope.READ, Scope.WRITE, Scope.ADMIN],
    Role.MEMBER: [Scope.READ, Scope.WRITE],
    Role.VIEWER: [Scope.READ],
    Role.BILLING: [Scope.READ, Scope.WRITE],
}


def run(service: Any, **kwargs: Any) -> Any:
    return atomic_with_retry(service, actor=kwargs.pop("actor", SYSTEM), **kwargs)


@dataclass
class Builder:
    """Makes users, organizations, members and keys the way the product does."""

    users: int = 0
    keys: dict[str, str] = field(default_factory=dict)

    def user(self, email: str | None = None, *, is_staff: bool = False) -> User:
        self.users += 1
        return run(  # type: ignore[no-any-return]
            services.user_register,
            email=email or f"user{self.users}@example.com",
            password="pw",
            is_staff=is_staff,
        )

    def organization(self, name: str = "Acme", owner: User | None = None) -> Organization:
        return run(  # type: ignore[no-any-return]
            services.organization_create, name=name, owner=owner or self.user()
        )

    def project(self, organization: Organization, name: str = "Research") -> Project:
        return run(services.project_create, organization=organization, name=name)  # type: ignore[no-any-return]

    def member(
        self, organization: Organization, role: str, user: User | None = None, **kwargs: Any
    ) -> Membership:
        user = user or self.user()
        _, token = run(
            services.invitation_create,
            organization=organization,
            email=user.email,
            role=role,
            **kwargs,
        )
        return run(services.invitation_accept, actor=Actor(user=user), token=token)  # type: ignore[no-any-return]

    def key(
        self,
        organization: Organization,
        user: User,
        scopes: list[str] | None = None,
        project: Project | None = None,
        expires_at: datetime | None = None,
    ) -> tuple[ApiKey, str]:
        membership = Membership.objects.get(organization=organization, user=user)
        return run(  # type: ignore[no-any-return]
            services.api_key_create,
            organization=organization,
            user=user,
            name="k",
            scopes=scopes or ROLE_KEY_SCOPES[Role(membership.role)],
            project=project,
            expires_at=expires_at,
        )


def client_with_key(secret: str | None) -> APIClient:
    client = APIClient()
    if secret:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client
