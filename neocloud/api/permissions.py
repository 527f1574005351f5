"""Permissions for operator endpoints (the fleet): staff only; writes need an admin key."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from neocloud.api.actor import actor_for
from tenants.models import Scope


class IsOperator(BasePermission):
    message = "operators only"

    def has_permission(self, request: Request, view: Any) -> bool:
        actor = actor_for(request)
        needed = Scope.READ if request.method in SAFE_METHODS else Scope.ADMIN
        return actor.user is not None and actor.is_staff and actor.has_scope(needed)
