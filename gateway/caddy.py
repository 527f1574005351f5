"""Caddy's admin API: the gateway's server and one route per web endpoint.

NeoCloud owns one server (``SERVER``) in Caddy's JSON config; every route carries an ``@id``
so it is replaced or deleted by id, and the server ends in a catch-all 404, so a route is
inserted at the front (``PUT …/routes/0``). Each route's first handler is ``forward_auth``
(the JSON the Caddyfile directive expands to): a GET to ``/gateway/auth`` carrying the
original method, URI and host; a 2xx answer lets the request through, any other answer goes
to the client as it is (401, 403, or a redirect that sets the endpoint's cookie).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

SERVER = "neocloud_gateway"
ROUTE_PREFIX = "neocloud-endpoint-"
TIMEOUT_S = 5.0


class CaddyUnavailable(Exception):
    """The admin API did not answer, or refused what it was sent."""


@dataclass(frozen=True)
class Route:
    """One web endpoint: its host and where its requests go (every node of the run)."""

    endpoint_id: str
    host: str
    upstreams: tuple[str, ...]

    @property
    def route_id(self) -> str:
        return ROUTE_PREFIX + self.endpoint_id


def route_config(route: Route, *, auth_upstream: str) -> dict[str, Any]:
    forward_auth = {
        "handler": "reverse_proxy",
        "upstreams": [{"dial": auth_upstream}],
        "rewrite": {"method": "GET", "uri": "/gateway/auth"},
        "headers": {
            "request": {
                "set": {
                    "X-Forwarded-Method": ["{http.request.method}"],
                    "X-Forwarded-Uri": ["{http.request.uri}"],
                    # NeoCloud answers its own host name, not the endpoint's.
                    "Host": ["{http.reverse_proxy.upstream.hostport}"],
                },
            }
        },
        # What the directive expands to: on 2xx, go on to the next handler.
        "handle_response": [
            {
                "match": {"status_code": [2]},
                "routes": [{"handle": [{"handler": "headers", "request": {}}]}],
            }
        ],
    }
    upstream = {
        "handler": "reverse_proxy",
        "upstreams": [{"dial": address} for address in route.upstreams],
        "flush_interval": -1,  # streams (a notebook's events, server-sent events) unbuffered
    }
    return {
        "@id": route.route_id,
        "match": [{"host": [route.host]}],
        "handle": [{"handler": "subroute", "routes": [{"handle": [forward_auth, upstream]}]}],
        "terminal": True,
    }


NOT_FOUND = {"handle": [{"handler": "static_response", "status_code": 404}]}


def server_config(routes: list[dict[str, Any]], *, listen: list[str], tls: bool) -> dict[str, Any]:
    server: dict[str, Any] = {"listen": listen, "routes": [*routes, NOT_FOUND]}
    if tls:
        server["tls_connection_policies"] = [{}]  # the wildcard certificate of the tls app
    else:
        server["automatic_https"] = {"disable": True}
    return server


class Caddy:
    """A client of one Caddy's admin API (bound to loopback: it has no authentication)."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url.rstrip("/")

    def server(self) -> dict[str, Any] | None:
        found = self._call("GET", f"/config/apps/http/servers/{SERVER}")
        return found if isinstance(found, dict) else None

    def server_put(self, server: dict[str, Any]) -> None:
        """The whole server at once: its routes become exactly these."""
        if self.server() is None:
            self._call("PUT", f"/config/apps/http/servers/{SERVER}", server)
        else:
            self._call("PATCH", f"/config/apps/http/servers/{SERVER}", server)

    def route_put(self, route: dict[str, Any]) -> None:
        """Replace the route of this id, or insert it before the catch-all."""
        try:
            self._call("PATCH", f"/id/{route['@id']}", route)
        except _NotFound:
            self._call("PUT", f"/config/apps/http/servers/{SERVER}/routes/0", route)

    def route_delete(self, route_id: str) -> None:
        try:
            self._call("DELETE", f"/id/{route_id}")
        except _NotFound:
            return  # gone already

    def _call(self, method: str, path: str, body: object = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 - the operator's admin URL, http(s)
            self.admin_url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:  # noqa: S310
                text = answer.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode(errors="replace")
            if exc.code == 404 or b"unknown object ID" in detail.encode():
                raise _NotFound(detail) from exc
            if exc.code == 400 and method == "GET" and "invalid traversal path" in detail:
                return None  # no such server yet
            raise CaddyUnavailable(f"{method} {path}: {exc.code} {detail}") from exc
        except OSError as exc:
            raise CaddyUnavailable(f"{method} {path}: {exc}") from exc
        return json.loads(text) if text.strip() else None


class _NotFound(CaddyUnavailable):
    pass
