"""The signed-in user's own settings: SSH keys (issue 32). Keys are the user's, not an
organization's, so the page needs no organization; writes go to the same services as
``/api/v1/ssh-keys``. A private key pasted here is refused, and the form is not shown back
with it (nothing of it is rendered, stored or logged)."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path
from django.views.decorators.http import require_http_methods, require_POST

from console.forms.account import SshKeyForm
from console.guard import ConsoleRequest, signed_in
from neocloud.core.errors import ApplicationError
from neocloud.core.transactions import atomic_with_retry
from tenants import selectors, services


def _page(request: ConsoleRequest, error: str = "", status: int = 200) -> HttpResponse:
    """The page with an empty form: never the text sent back (it may be a private key)."""
    keys = selectors.ssh_key_list(actor=request.console.actor)
    context = {"keys": keys, "form": SshKeyForm(), "error": error}
    return render(request, "console/account/ssh_keys.html", context, status=status)


@require_http_methods(["GET", "POST"])
@signed_in
def ssh_keys(request: ConsoleRequest) -> HttpResponse:
    """Your SSH keys, and a form to add one."""
    if request.method == "GET":
        return _page(request)
    form = SshKeyForm(request.POST)
    if not form.is_valid():
        problems = "; ".join(f"{k}: {' '.join(map(str, v))}" for k, v in form.errors.items())
        return _page(request, problems, status=400)
    try:
        key = atomic_with_retry(
            services.ssh_key_add,
            actor=request.console.actor,
            public_key=form.cleaned_data["public_key"],
            name=form.cleaned_data["name"],
        )
    except ApplicationError as error:
        return _page(request, f"{error.message} ({error.code})", status=error.http_status)
    messages.success(request, f"The SSH key {key.name} ({key.fingerprint}) was added.")
    return redirect("console:ssh-keys")


@require_POST
@signed_in
def ssh_key_remove(request: ConsoleRequest, key_id: str) -> HttpResponse:
    key = selectors.ssh_key_list(actor=request.console.actor).filter(pk=key_id).first()
    if key is None:
        raise Http404
    atomic_with_retry(services.ssh_key_remove, actor=request.console.actor, ssh_key=key)
    messages.success(request, f"The SSH key {key.name} was removed.")
    return redirect("console:ssh-keys")


urlpatterns: list[URLPattern] = [
    path("account/ssh-keys", ssh_keys, name="ssh-keys"),
    path("account/ssh-keys/<uuid:key_id>/remove", ssh_key_remove, name="ssh-key-remove"),
]
