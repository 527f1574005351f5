"""Admin helpers shared by the apps: writes go through services as the operator behind the
request (a tenancy actor, hence here), refusals become messages."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from neocloud.core.errors import ApplicationError
from neocloud.core.transactions import atomic_with_retry
from tenants.access import Actor
from tenants.models import User


def admin_actor(request: HttpRequest) -> Actor:
    """The operator behind an admin request, as the services and the log know actors."""
    return Actor(
        user=request.user if isinstance(request.user, User) else None,
        correlation_id=f"admin-{uuid.uuid4()}",
    )


class ServiceAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """A refused write shows its message instead of an error page."""

    def changeform_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return super().changeform_view(request, *args, **kwargs)
        except ApplicationError as exc:
            messages.error(request, f"{exc.code}: {exc.message}")
            return HttpResponseRedirect(request.get_full_path())

    def delete_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return super().delete_view(request, *args, **kwargs)
        except ApplicationError as exc:
            messages.error(request, f"{exc.code}: {exc.message}")
            return HttpResponseRedirect(request.get_full_path())

    def run(self, request: HttpRequest, service: Any, **kwargs: Any) -> Any:
        return atomic_with_retry(service, actor=admin_actor(request), **kwargs)

    def run_each(
        self,
        request: HttpRequest,
        service: Any,
        queryset: QuerySet[Any],
        argument: str,
        **kwargs: Any,
    ) -> None:
        """An admin action: the service once per selected row, refusals reported per row."""
        done = 0
        for obj in queryset:
            try:
                self.run(request, service, **{argument: obj}, **kwargs)
                done += 1
            except ApplicationError as exc:
                messages.error(request, f"{obj}: {exc.code}: {exc.message}")
        if done:
            messages.success(request, f"{done} done")


class ReadOnlyServiceAdmin(ServiceAdmin):
    """Rows that only services write: no add, change or delete forms."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
