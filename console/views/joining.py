"""Joining: accepting an invitation by its link (making the account when there is none),
self sign-up where the operator allows it (``CONSOLE_SIGNUP_ENABLED``), and verifying a
signed-up user's address by the link mailed to them (an invitation's link proves it already).

Making an account and what it joins (the invitation's organization, or a new one) are one
transaction: a refused acceptance or organization registers no one, and the person can try
again with the same link or e-mail address.
"""

from __future__ import annotations

from axes.handlers.proxy import AxesProxyHandler
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path, reverse
from django.views.decorators.http import require_http_methods, require_POST

from console import mail
from console.forms.joining import JoinForm, SignUpForm
from console.guard import ConsoleRequest, console_of, signed_in, switch_to
from console.selectors import joining as selectors
from neocloud.core import ratelimit
from neocloud.core.addresses import client_address
from neocloud.core.errors import ApplicationError
from neocloud.core.logs import request_path
from neocloud.core.transactions import atomic_with_retry
from tenants import services
from tenants.access import Actor
from tenants.actor import request_correlation
from tenants.models import Invitation, InvitationState, Membership, Organization, User

# The password backend: ``login`` must name one when several are configured (axes's).
BACKEND = "django.contrib.auth.backends.ModelBackend"


def _visitor(request: HttpRequest) -> Actor:
    """Someone without an account yet: an actor with no rights, for the log's metadata."""
    return Actor(user=None, correlation_id=request_correlation(request))


def _welcome(request: HttpRequest, user: User, organization: Organization) -> HttpResponse:
    if not request.user.is_authenticated:
        # django-axes logs and keeps the sign-in's path: here the invitation's token.
        AxesProxyHandler.update_request(request)
        request.axes_path_info = request_path(request)  # type: ignore[attr-defined]
        login(request, user, backend=BACKEND)
    switch_to(request, organization.pk)
    messages.success(request, f"Welcome to {organization.name}.")
    return redirect("console:overview")


# --- invitations ----------------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
def invitation(request: HttpRequest, token: str) -> HttpResponse:
    """The invitation's page: join as the signed-in user of its e-mail address, or make the
    account it is for; a used, revoked, expired or unknown link says so."""
    found = selectors.invitation_for(token)
    if found is None or found.state != InvitationState.PENDING:
        state = found.state if found else "unknown"
        return render(
            request,
            "console/joining/invitation_unusable.html",
            {"state": state},
            status=404 if found is None else 410,
        )
    if request.user.is_authenticated:
        return _accept_signed_in(request, found, token)
    if selectors.has_account(found.email):
        return render(request, "console/joining/invitation_sign_in.html", {"invitation": found})
    return _join_as_new(request, found, token)


def _accept_signed_in(request: HttpRequest, found: Invitation, token: str) -> HttpResponse:
    console = console_of(request)
    context: dict[str, object] = {"invitation": found, "user": console.user}
    if console.user.email != found.email:
        return render(request, "console/joining/invitation_other.html", context, status=403)
    if request.method == "POST":
        try:
            membership: Membership = atomic_with_retry(
                services.invitation_accept, actor=console.actor, token=token
            )
        except ApplicationError as error:
            context["error"] = error.message
            return render(request, "console/joining/invitation_accept.html", context, status=400)
        return _welcome(request, console.user, membership.organization)
    return render(request, "console/joining/invitation_accept.html", context)


def _join_as_new(request: HttpRequest, found: Invitation, token: str) -> HttpResponse:
    form = JoinForm(request.POST or None, email=found.email)
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            try:
                user, membership = atomic_with_retry(
                    _register_and_accept,
                    actor=_visitor(request),
                    email=found.email,
                    full_name=form.cleaned_data["full_name"],
                    password=form.cleaned_data["password"],
                    token=token,
                )
            except ApplicationError as error:
                form.add_error(None, error.message)
            else:
                return _welcome(request, user, membership.organization)
    return render(
        request,
        "console/joining/invitation_join.html",
        {"invitation": found, "form": form},
        status=status,
    )


def _register_and_accept(
    *, actor: Actor, email: str, full_name: str, password: str, token: str
) -> tuple[User, Membership]:
    user = services.user_register(actor=actor, email=email, full_name=full_name, password=password)
    member = Actor(user=user, correlation_id=actor.correlation_id)
    return user, services.invitation_accept(actor=member, token=token)


# --- self sign-up ---------------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
def sign_up(request: HttpRequest) -> HttpResponse:
    """A new user with their own organization, which they own; only where the operator
    switched it on (else there is no such page)."""
    if not settings.CONSOLE_SIGNUP_ENABLED:
        raise Http404
    if request.user.is_authenticated:
        return redirect("console:overview")
    form = SignUpForm(request.POST or None)
    status = 200
    if request.method == "POST":
        status = 400
        allowed = ratelimit.allow(
            "sign-up", client_address(request), limit=settings.SIGNUPS_PER_HOUR, window_s=3600
        )
        if not allowed:
            form.add_error(None, "Too many sign-ups from your address: try again in an hour.")
            status = 429
        elif form.is_valid():
            try:
                user, organization = atomic_with_retry(
                    _register_with_organization,
                    actor=_visitor(request),
                    email=form.cleaned_data["email_address"],
                    full_name=form.cleaned_data["full_name"],
                    password=form.cleaned_data["password"],
                    organization_name=form.cleaned_data["organization"],
                )
            except ApplicationError as error:
                if "email" in error.fields:
                    form.add_error("email_address", error.message)
                else:
                    form.add_error(None, error.message)
            else:
                _send_verification(request, user)
                return _welcome(request, user, organization)
    return render(request, "console/joining/sign_up.html", {"form": form}, status=status)


def _register_with_organization(
    *, actor: Actor, email: str, full_name: str, password: str, organization_name: str
) -> tuple[User, Organization]:
    """Creating organizations is the operators' (``organization.operate``): self sign-up is
    the platform doing it for the visitor, as its own system actor."""
    user = services.user_register(
        actor=actor, email=email, full_name=full_name, password=password, email_verified=False
    )
    platform = Actor(user=None, system="console.sign-up", correlation_id=actor.correlation_id)
    organization = services.organization_create(actor=platform, name=organization_name, owner=user)
    return user, organization


# --- verifying the address -------------------------------------------------------------------


def _send_verification(request: HttpRequest, user: User) -> bool:
    """Mail the user their verification link (after the sign-up committed)."""
    token = services.email_verification_token(user)
    link = request.build_absolute_uri(reverse("console:verify-email", args=[token]))
    return mail.email_verification_send(user=user, link=link)


@require_http_methods(["GET"])
def verify_email(request: HttpRequest, token: str) -> HttpResponse:
    """The link mailed at sign-up: it verifies the address whether or not its user is
    signed in here (the token is the proof); a tampered or expired one says so."""
    try:
        user = atomic_with_retry(services.user_email_verify, actor=_visitor(request), token=token)
    except ApplicationError as error:
        return render(
            request, "console/joining/verify_email.html", {"error": error.message}, status=400
        )
    if request.user.is_authenticated and request.user.pk == user.pk:
        messages.success(request, f"Your address {user.email} is verified.")
        return redirect("console:overview")
    return render(request, "console/joining/verify_email.html", {"verified": user})


@require_POST
@signed_in
def verify_email_resend(request: ConsoleRequest) -> HttpResponse:
    """Mail a new link, at most ``EMAIL_VERIFICATIONS_PER_HOUR`` an hour per user."""
    user = request.console.user
    if user.email_verified_at is not None:
        messages.info(request, "Your address is verified already.")
    elif not ratelimit.allow(
        "email-verification",
        str(user.pk),
        limit=settings.EMAIL_VERIFICATIONS_PER_HOUR,
        window_s=3600,
    ):
        return render(
            request,
            "console/joining/verify_email.html",
            {"error": "Too many verification e-mails: try again in an hour."},
            status=429,
        )
    elif _send_verification(request, user):
        messages.success(request, f"A new verification link was sent to {user.email}.")
    else:
        messages.error(request, "The e-mail could not be sent: try again later.")
    return redirect("console:overview")


urlpatterns: list[URLPattern] = [
    path("invitations/<str:token>", invitation, name="invitation"),
    path("signup", sign_up, name="signup"),
    path("verify-email/<str:token>", verify_email, name="verify-email"),
    path("verify-email", verify_email_resend, name="verify-email-resend"),
]
