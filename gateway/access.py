"""Who may through the gateway: the decision ``/gateway/auth`` answers Caddy's forward_auth.

A request to ``<endpoint>.<GATEWAY_DOMAIN>`` passes with, in this order:
1. ``Authorization: Bearer <endpoint token>`` (programs);
2. ``?token=<endpoint token>``, once: answered by a redirect to the same URI without it that
   sets the endpoint's cookie (a browser opening a shared link);
3. ``?neocloud_ticket=…``, once: the console's signed, one-time, 60-second ticket for a
   signed-in member (``ticket_issue``), answered the same way;
4. the endpoint's cookie: signed, host-only (this endpoint's name alone), for a user still
   allowed to read the workload or a token that still exists.
Else a browser is sent to the console to sign in and an API caller gets 401. The console's
own session cookie never reaches the gateway's domain, where customers' code runs. Every
check first reads whether the endpoint is live, so an ended run's URL stops answering at the
commit that ended it, whatever Caddy's routes still say.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from django.conf import settings
from django.core import signing
from django.core.cache import cache

from gateway import selectors
from gateway.models import EndpointToken
from gateway.selectors import WebEndpoint
from scheduler.models import Workload
from tenants import secrets
from tenants.access import Action, Actor
from tenants.models import User

COOKIE = "neocloud_gateway"
TICKET = "neocloud_ticket"
TOKEN = "token"  # noqa: S105 - the query parameter's name
TICKET_MAX_AGE_S = 60


@dataclass(frozen=True)
class Decision:
    """``status`` 200 lets the request through; anything else is the client's answer."""

    status: int
    reason: str
    location: str = ""
    cookie: str = ""  # a value for the endpoint's cookie, with the redirect


def request_check(
    *, host: str, uri: str, authorization: str, cookie: str, browser: bool
) -> Decision:
    named = selectors.endpoint_parse(host)
    endpoint = selectors.endpoint_live(*named) if named else None
    if endpoint is None:
        return Decision(403, "no such web endpoint, or its run has ended")
    if authorization:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and _token_find(endpoint, token.strip()):
            return Decision(200, "endpoint token")
        return Decision(401, "not a token of this endpoint")
    query = dict(parse_qsl(urlsplit(uri).query))
    if TOKEN in query:
        found = _token_find(endpoint, query[TOKEN])
        if found is None:
            return Decision(401, "not a token of this endpoint")
        return _enter(endpoint, uri, {"t": str(found.pk)})
    if TICKET in query:
        user_id = _ticket_redeem(endpoint, query[TICKET])
        if user_id is None or not _user_may(user_id, endpoint.workload):
            return Decision(403, "not a valid ticket for this endpoint")
        return _enter(endpoint, uri, {"u": user_id})
    if cookie and _cookie_valid(endpoint, cookie):
        return Decision(200, "endpoint cookie")
    if browser:
        sign_in = f"{settings.GATEWAY_CONSOLE_URL.rstrip('/')}/gateway/open?" + urlencode(
            {"endpoint": endpoint.endpoint_id, "next": uri}
        )
        return Decision(302, "sign in at the console", location=sign_in)
    return Decision(401, "a project member's sign-in or an endpoint token is needed")


def ticket_issue(*, actor: Actor, endpoint_id: str, next_uri: str) -> str | None:
    """The URL that lets the actor's browser into a live endpoint whose workload it may read
    (None: not live, or not the actor's to see), carrying a one-time ticket."""
    found = selectors.ENDPOINT_ID.match(endpoint_id)
    if actor.user is None or found is None:
        return None
    endpoint = selectors.endpoint_live(uuid.UUID(found[1]), int(found[2]))
    if endpoint is None or not _user_may(str(actor.user.pk), endpoint.workload):
        return None
    path = next_uri if next_uri.startswith("/") and not next_uri.startswith("//") else "/"
    ticket = signing.dumps(
        {"e": endpoint.endpoint_id, "u": str(actor.user.pk), "n": uuid.uuid4().hex},
        salt=f"gateway.ticket.{endpoint.endpoint_id}",
    )
    parts = urlsplit(path)
    query = urlencode([*parse_qsl(parts.query), (TICKET, ticket)])
    host = selectors.endpoint_host(endpoint.endpoint_id)
    return urlunsplit((settings.GATEWAY_SCHEME, host, parts.path, query, ""))


def _enter(endpoint: WebEndpoint, uri: str, holder: dict[str, str]) -> Decision:
    """A redirect to the URI without its one-time parameter, setting the endpoint's cookie."""
    parts = urlsplit(uri)
    kept = [(k, v) for k, v in parse_qsl(parts.query) if k not in {TOKEN, TICKET}]
    location = urlunsplit(("", "", parts.path or "/", urlencode(kept), ""))
    value = signing.dumps(holder, salt=f"gateway.cookie.{endpoint.endpoint_id}")
    return Decision(302, "signed in to the endpoint", location=location, cookie=value)


def _token_find(endpoint: WebEndpoint, token: str) -> EndpointToken | None:
    parts = token.split("_", 2)
    if len(parts) != 3:
        return None
    found = EndpointToken.objects.filter(
        prefix=parts[1], workload_id=endpoint.workload.pk, port=endpoint.port
    ).first()
    if found is None or not secrets.matches(token, found.token_hash):
        return None
    return found


def _ticket_redeem(endpoint: WebEndpoint, ticket: str) -> str | None:
    try:
        data = signing.loads(
            ticket, salt=f"gateway.ticket.{endpoint.endpoint_id}", max_age=TICKET_MAX_AGE_S
        )
    except signing.BadSignature:
        return None
    # One use: a ticket seen in a log, a proxy or the browser's history opens nothing.
    if not cache.add(f"gateway:ticket:{data['n']}", 1, TICKET_MAX_AGE_S * 2):
        return None
    return str(data["u"])


def _cookie_valid(endpoint: WebEndpoint, cookie: str) -> bool:
    try:
        holder = signing.loads(
            cookie,
            salt=f"gateway.cookie.{endpoint.endpoint_id}",
            max_age=settings.GATEWAY_COOKIE_MAX_AGE_S,
        )
    except signing.BadSignature:
        return False
    if "t" in holder:
        return EndpointToken.objects.filter(
            pk=holder["t"], workload_id=endpoint.workload.pk, port=endpoint.port
        ).exists()
    return _user_may(str(holder.get("u", "")), endpoint.workload)


def _user_may(user_id: str, workload: Workload) -> bool:
    """Still an active member who may read the workload (its project among theirs)."""
    user = User.objects.filter(pk=user_id, is_active=True).first()
    if user is None:
        return False
    visible = Actor(user=user).scope(Workload.objects.filter(pk=workload.pk), Action.WORKLOAD_READ)
    return visible.exists()
