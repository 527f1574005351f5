"""The overview, and the organization switcher."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from console.guard import ConsoleRequest, signed_in, switch_to
from console.selectors import overview as overview_selectors


@signed_in
def overview(request: ConsoleRequest) -> HttpResponse:
    return render(
        request, "console/overview.html", {"overview": overview_selectors.overview(request.console)}
    )


@require_POST
@signed_in
def switch(request: ConsoleRequest) -> HttpResponse:
    """Make another of the user's organizations the current one (none else: ignored)."""
    wanted = request.POST.get("organization", "")
    for membership in request.console.memberships:
        if str(membership.organization_id) == wanted:
            switch_to(request, membership.organization_id)
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
        back = ""
    return redirect(back or "console:overview")
