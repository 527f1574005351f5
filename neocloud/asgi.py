"""ASGI entry point (``uvicorn neocloud.asgi:application``): long polls wait in coroutines,
holding no thread and no database connection (``execution.longpoll``); every other view runs
on a thread of its own, so none waits behind them. Bodies are bounded before Django reads
them (``neocloud.bodies.asgi_body_limit``)."""

import os
import re
from typing import Any

from django.core.asgi import get_asgi_application

from neocloud.core.startup import settings_load_or_exit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "neocloud.settings")
# A sync request's connection is closed when it ends (see DATABASE_CONN_MAX_AGE).
os.environ["DATABASE_CONN_MAX_AGE"] = "0"
# 3: as gunicorn's status for a worker that cannot boot (neocloud/wsgi.py); uvicorn's
# supervisor gives up on a worker that exits at once too.
settings_load_or_exit(status=3)

django_application = get_asgi_application()

# They need the apps loaded.
from asgiref.sync import markcoroutinefunction  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth.middleware import AuthenticationMiddleware  # noqa: E402
from django.contrib.sessions.middleware import SessionMiddleware  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402
from django.core.handlers.exception import convert_exception_to_response  # noqa: E402
from django.http import HttpRequest  # noqa: E402
from django.http.response import HttpResponseBase  # noqa: E402
from django.middleware.clickjacking import XFrameOptionsMiddleware  # noqa: E402
from django.middleware.security import SecurityMiddleware  # noqa: E402
from django.utils.deprecation import MiddlewareMixin  # noqa: E402
from django.utils.module_loading import import_string  # noqa: E402

from neocloud.bodies import ASGIApp, Receive, Send, asgi_body_limit  # noqa: E402

LONG_POLLS = re.compile(r"^/api/v1/(nodes/[^/]+/assignments|workloads/[^/]+/logs)/?$")
SIGN_IN_ONLY = {"axes.middleware.AxesMiddleware"}  # it acts on sign-ins, never on a long poll


class _BuiltInHooks:
    """The hooks of Django's built-in middlewares that matter to a long poll and do no I/O,
    called on the event loop: the security redirect and headers, the session's and
    authentication's request hooks (lazy: the session and the user are loaded by the DRF view,
    on a reader thread), ``X-Frame-Options``. Under Django's own chain each built-in runs in
    the request's thread, which would sleep beside every waiter. Left out: CSRF (these are
    GETs, and DRF checks it for a session), messages, common
    (``APPEND_SLASH``: these routes have no slash) and the session's save (a GET here changes
    no session)."""

    sync_capable = False
    async_capable = True

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response
        self.security = SecurityMiddleware(get_response)
        self.sessions = SessionMiddleware(get_response)
        self.authentication = AuthenticationMiddleware(get_response)
        self.frames = XFrameOptionsMiddleware(get_response)
        markcoroutinefunction(self)

    async def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response: Any = self.security.process_request(request)
        if response is None:
            self.sessions.process_request(request)
            self.authentication.process_request(request)
            response = await self.get_response(request)
        response = self.security.process_response(request, response)
        return self.frames.process_response(request, response)


class LongPollHandler(ASGIHandler):
    """Django's ASGI handler for the two long polls, so that a waiting one holds no thread:
    its chain is ``MIDDLEWARE``'s async ones with ``_BuiltInHooks`` in the built-ins' place
    (nothing adapted from sync, axes left out), and it keeps no thread-sensitive context
    (Django's gives each request a thread for its life). Its few sync calls (the request
    signals, closing the response) share asgiref's one thread; the view reads on
    ``execution.longpoll``'s readers."""

    def load_middleware(self, is_async: bool = False) -> None:
        self._view_middleware: list[Any] = []
        self._template_response_middleware: list[Any] = []
        self._exception_middleware: list[Any] = []
        handler = convert_exception_to_response(self._get_response_async)  # type: ignore[attr-defined]
        hooks = False
        for path in reversed(settings.MIDDLEWARE):  # innermost first
            middleware = import_string(path)
            if path in SIGN_IN_ONLY:
                continue
            if issubclass(middleware, MiddlewareMixin):  # a built-in: its hooks, in one place
                if not hooks:
                    handler, hooks = convert_exception_to_response(_BuiltInHooks(handler)), True
                continue
            handler = convert_exception_to_response(middleware(handler))
        self._middleware_chain = handler

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        await self.handle(scope, receive, send)


long_polls = LongPollHandler()


async def _routed(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    app: ASGIApp = django_application
    if scope["type"] == "http" and LONG_POLLS.match(scope["path"]):
        app = long_polls
    await app(scope, receive, send)


application = asgi_body_limit(_routed)
