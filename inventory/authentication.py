"""``Authorization: Node <token>``: node agents, not customers, report heartbeats."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib.auth.models import AnonymousUser
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from inventory.models import Node
from tenants import secrets


class NodeTokenAuthentication(authentication.BaseAuthentication):
    """Authenticates the node named in the URL by its agent token; ``request.auth`` is the
    node."""

    keyword = "Node"

    def authenticate(self, request: Request) -> tuple[Any, Node] | None:
        header = authentication.get_authorization_header(request).decode(errors="replace")
        keyword, _, token = header.partition(" ")
        if keyword != self.keyword:
            return None
        node_id = request.parser_context["kwargs"].get("pk") if request.parser_context else None
        try:
            node = Node.objects.filter(pk=uuid.UUID(str(node_id))).first()
        except ValueError:
            node = None
        if node is None or not secrets.matches(token.strip(), node.token_hash):
            raise exceptions.AuthenticationFailed("invalid node token")
        return AnonymousUser(), node

    def authenticate_header(self, request: Request) -> str:
        return f'{self.keyword} realm="nodes"'
