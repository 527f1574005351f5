"""Writes: Caddy's routes kept equal to the live web endpoints, and endpoint tokens.

Routes are an effect outside the database: they change after the commit that changed the
endpoints (``routes_sync``, on scheduler's ``endpoints_changed`` and ``workload_ended``
hooks), and beat's ``routes_reconcile`` repairs whatever a crash or a lost call left. The
authorization (``access``) never trusts a route: it reads the endpoint's liveness itself.
"""

from __future__ import annotations

import logging
import secrets as random
import uuid

from django.conf import settings

from events import store
from events.store import NO_STREAM
from gateway import events as ev
from gateway import selectors
from gateway.caddy import Caddy, CaddyUnavailable, Route, route_config, server_config
from gateway.errors import NotAWebPort
from gateway.models import EndpointToken
from scheduler.models import Workload
from tenants import secrets
from tenants.access import Action, Actor

logger = logging.getLogger(__name__)

TOKEN_PREFIX = "ncg"  # noqa: S105 - what a token starts with


def _caddy() -> Caddy:
    return Caddy(settings.GATEWAY_ADMIN_URL)


def _config(route: Route) -> dict[str, object]:
    return route_config(route, auth_upstream=settings.GATEWAY_AUTH_UPSTREAM)


def routes_reconcile() -> int:
    """Caddy's gateway server holds exactly the live endpoints' routes; how many. The whole
    server is put only when it differs, so a reconcile that finds it right changes nothing."""
    if not settings.GATEWAY_DOMAIN:
        return 0
    routes = selectors.routes_live()
    wanted = server_config(
        [_config(r) for r in routes],
        listen=settings.GATEWAY_LISTEN,
        tls=settings.GATEWAY_SCHEME == "https",
    )
    caddy = _caddy()
    if caddy.server() != wanted:
        caddy.server_put(wanted)
    return len(routes)


def routes_sync(workload_id: uuid.UUID) -> None:
    """After a commit: the workload's routes as its endpoints now are. Never raises (it runs
    on commit); what fails is logged and left to the reconcile."""
    if not settings.GATEWAY_DOMAIN:
        return
    workload = Workload.objects.filter(pk=workload_id).first()
    if workload is None:
        return
    live = {e.port: selectors.route_of(e) for e in selectors.endpoints_of(workload)}
    caddy = _caddy()
    try:
        for port in workload.http_ports:
            if port in live:
                caddy.route_put(_config(live[port]))
            else:
                caddy.route_delete(Route(selectors.endpoint_id(workload.pk, port), "", ()).route_id)
    except CaddyUnavailable:
        logger.warning("gateway routes of %s not synced; reconciling", workload_id, exc_info=True)
        try:
            routes_reconcile()
        except CaddyUnavailable:
            logger.exception("gateway reconcile failed: the beat will retry")


def endpoint_token_create(
    *, actor: Actor, workload: Workload, port: int, name: str = ""
) -> tuple[EndpointToken, str]:
    """A token for programs to reach one web port of a workload the actor may change; the
    token is returned here once, only its hash is kept."""
    actor.require(Action.WORKLOAD_WRITE, workload.organization)
    if port not in workload.http_ports:
        raise NotAWebPort(
            f"port {port} is not among the workload's http_ports {workload.http_ports}",
            fields={"port": ["not a web port of this workload"]},
        )
    prefix = random.token_hex(6)
    token = f"{TOKEN_PREFIX}_{prefix}_{secrets.new_token()}"
    token_id = uuid.uuid4()
    store.append(
        ev.ENDPOINT_TOKEN_STREAM,
        str(token_id),
        [
            ev.EndpointTokenCreated(
                organization_id=workload.organization_id,
                project_id=workload.project_id,
                workload_id=workload.pk,
                port=port,
                name=name,
                prefix=prefix,
                token_hash=secrets.digest(token),
                created_by=actor.user.pk if actor.user else None,
            )
        ],
        expected_version=NO_STREAM,
        metadata=actor.metadata(workload.organization_id),
    )
    return EndpointToken.objects.get(pk=token_id), token
