"""The gateway's two plain views (no API key authentication runs on them):
``GET /gateway/auth``, Caddy's forward_auth, and ``GET /gateway/open``, where the console
hands a signed-in member's browser a one-time ticket into an endpoint."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.views.decorators.http import require_GET

from gateway import access
from tenants.access import Actor
from tenants.models import User


@require_GET
def auth(request: HttpRequest) -> HttpResponse:
    """Caddy asks before every request to a web endpoint: 2xx lets it through; any other
    answer is the client's (401, 403, a redirect to sign in or one setting the cookie)."""
    decision = access.request_check(
        host=request.headers.get("X-Forwarded-Host", ""),
        uri=request.headers.get("X-Forwarded-Uri", "/"),
        authorization=request.headers.get("Authorization", ""),
        cookie=request.COOKIES.get(access.COOKIE, ""),
        browser="text/html" in request.headers.get("Accept", ""),
    )
    response = (
        HttpResponseRedirect(decision.location)
        if decision.location
        else HttpResponse(decision.reason + "\n", status=decision.status, content_type="text/plain")
    )
    response["Cache-Control"] = "no-store"
    if decision.cookie:
        # Host-only (no Domain): the endpoint's own name, no other endpoint's.
        response.set_cookie(
            access.COOKIE,
            decision.cookie,
            max_age=settings.GATEWAY_COOKIE_MAX_AGE_S,
            secure=settings.GATEWAY_SCHEME == "https",
            httponly=True,
            samesite="Lax",
        )
    return response


@require_GET
@login_required
def open_endpoint(request: HttpRequest) -> HttpResponse:
    """A signed-in member goes on to the endpoint with a one-time ticket; anyone else who
    may not read its workload (or an endpoint that is not live) gets 404."""
    user = request.user if isinstance(request.user, User) else None
    url = access.ticket_issue(
        actor=Actor(user=user),
        endpoint_id=request.GET.get("endpoint", ""),
        next_uri=request.GET.get("next", "/"),
    )
    if url is None:
        return HttpResponse("no such web endpoint\n", status=404, content_type="text/plain")
    return HttpResponseRedirect(url)
