"""The base of every tenant-owned endpoint."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from django.db.models import Model, QuerySet
from rest_framework.filters import OrderingFilter
from rest_framework.relations import PrimaryKeyRelatedField
from rest_framework.serializers import Serializer
from rest_framework.viewsets import GenericViewSet

from neocloud.api.pagination import Cursor
from neocloud.api.queries import KnownParameters
from neocloud.core.transactions import atomic_with_retry
from tenants.access import Action, Actor
from tenants.actor import actor_for
from tenants.models import Organization, Project

T = TypeVar("T")
RELATED_READ_ACTIONS: dict[type[Model], Action] = {
    Organization: Action.ORGANIZATION_READ,
    Project: Action.PROJECT_READ,
}


class TenantViewSet(GenericViewSet):  # type: ignore[type-arg]
    """Serves only what ``Actor.scope`` lets the caller see for ``read_action``: the one
    tenant filter, so another tenant's object is a 404. Writes go to services, which check
    the actor's rights for the action."""

    read_action: ClassVar[Action]
    pagination_class = Cursor
    filter_backends = [KnownParameters, OrderingFilter]

    @property
    def actor(self) -> Actor:
        return actor_for(self.request)

    def get_queryset(self) -> QuerySet[Model]:
        return self.actor.scope(super().get_queryset(), self.read_action)

    def validated(self, serializer_class: type[Serializer], data: Any) -> dict[str, Any]:  # type: ignore[type-arg]
        """Validate input; references to tenant-owned rows resolve only within the caller's
        tenants, so another tenant's id is "does not exist", like a wrong one."""
        serializer = serializer_class(data=data, context=self.get_serializer_context())
        for field in serializer.fields.values():
            if isinstance(field, PrimaryKeyRelatedField):
                relation: Any = field  # the stubs type `queryset` as a manager descriptor
                model = relation.queryset.model
                relation.queryset = self.actor.scope(
                    model._default_manager.all(), RELATED_READ_ACTIONS[model]
                )
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)

    def perform(self, service: Callable[..., T], **kwargs: Any) -> T:
        """Call a service as this request's actor, in a transaction, retried on conflicts."""
        return atomic_with_retry(service, actor=self.actor, **kwargs)
