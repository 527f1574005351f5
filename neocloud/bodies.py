"""Request bodies are bounded before anything reads them.

Parsing an 8 MiB JSON body took 484 MiB and 3.4 s of CPU, from any caller, before the API
looked at who it was. So a body over ``REQUEST_BODY_MAX_BYTES`` (the node agent's reports and
logs: ``AGENT_REQUEST_BODY_MAX_BYTES``, since a log request carries up to 1 MiB of output in
base64) is answered 413 ``body_too_large`` before authentication and parsing. A body sent
without a length (chunked) is read up to the limit and no further.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from neocloud.api.errors import error_body

_AGENT_PATH = re.compile(r"^/api/v1/nodes/[^/]+/(heartbeat|reports|logs)/?$")


def limit_for(path: str) -> int:
    if _AGENT_PATH.match(path):
        return int(settings.AGENT_REQUEST_BODY_MAX_BYTES)
    return int(settings.REQUEST_BODY_MAX_BYTES)


def too_large(request: HttpRequest, limit: int) -> HttpResponse:
    message = f"The request body is larger than {limit} bytes."
    if request.path.startswith("/api/"):
        body = error_body("body_too_large", message, limit_bytes=limit)
        return JsonResponse(body, status=413)
    return HttpResponse(message, status=413, content_type="text/plain")


class BodyLimitMiddleware:
    """Early in ``MIDDLEWARE``: before sessions, authentication and any parser. Sync and
    async alike (under ASGI a sync middleware would hold a thread for every long poll); under
    ASGI, ``asgi_body_limit`` has bounded the body before Django read it."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        refused = self._refused(request)
        if iscoroutinefunction(self):
            return self._served(request, refused)
        return refused if refused is not None else self.get_response(request)

    async def _served(self, request: HttpRequest, refused: HttpResponse | None) -> HttpResponse:
        return refused if refused is not None else await self.get_response(request)

    def _refused(self, request: HttpRequest) -> HttpResponse | None:
        limit = limit_for(request.path)
        length = request.META.get("CONTENT_LENGTH") or ""
        if length:
            if not length.isascii() or not length.isdigit():
                return None  # the server refuses it, not ours to read
            if int(length) > limit:
                return too_large(request, limit)
        elif request.META.get("wsgi.input_terminated"):
            data = request.META["wsgi.input"].read(limit + 1)  # chunked: no more than this
            if len(data) > limit:
                return too_large(request, limit)
            request._stream = io.BytesIO(data)
            request.META["CONTENT_LENGTH"] = str(len(data))
        return None


Receive = Callable[[], Awaitable[Any]]
Send = Callable[[Any], Awaitable[None]]
ASGIApp = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]


def asgi_body_limit(app: ASGIApp) -> ASGIApp:
    """Django's ASGI handler reads a whole body before any middleware sees it, so under ASGI
    the limit is kept here: a body declared or sent past it is answered 413 and never read
    further; one within it is handed on as read."""

    async def bounded(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        limit = limit_for(scope["path"])
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            await _too_large_asgi(scope, send, limit)
            return
        body = bytearray()
        message = {"type": "http.request", "more_body": True}
        while message["type"] == "http.request" and message.get("more_body"):
            message = await receive()
            body += message.get("body", b"")
            if len(body) > limit:
                await _too_large_asgi(scope, send, limit)
                return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            if message["type"] != "http.request":
                return message  # the client left
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await app(scope, replay, send)

    return bounded


async def _too_large_asgi(scope: dict[str, Any], send: Send, limit: int) -> None:
    message = f"The request body is larger than {limit} bytes."
    if scope["path"].startswith("/api/"):
        body = json.dumps(error_body("body_too_large", message, limit_bytes=limit)).encode()
        kind = b"application/json"
    else:
        body, kind = message.encode(), b"text/plain"
    headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})
