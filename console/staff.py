"""The operator pages' guard: staff users only. Anyone else signed in gets a 404, as for a
page that does not exist, so the operator pages are not revealed; anonymous callers are sent
to sign in, as on every console page."""

from __future__ import annotations

from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse

from console.guard import V, console_of


def staff_only(view: V) -> V:
    """The page needs a signed-in operator (``User.is_staff``, as ``Actor.is_staff`` reads
    it); ``request.console`` is their ``Console``."""

    @wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not (request.user.is_active and request.user.is_staff):
            raise Http404
        request.console = console_of(request)  # type: ignore[attr-defined]
        return view(request, *args, **kwargs)

    return guarded  # type: ignore[return-value]
