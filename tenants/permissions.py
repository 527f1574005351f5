"""Permissions for operator endpoints (the fleet), from the permission table: reading needs
``fleet.read``, anything else ``fleet.write`` (which the services check again)."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from tenants.access import Action
from tenants.actor import actor_for


class IsOperator(BasePermission):
    message = "operators only"

    def has_permission(self, request: Request, view: Any) -> bool:
        actor = actor_for(request)
        action = Action.FLEET_READ if request.method in SAFE_METHODS else Action.FLEET_WRITE
        return actor.user is not None and actor.allowed(action)
