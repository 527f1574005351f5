"""The organization: projects, members and roles, invitations, API keys, the audit feed.

Writes go to the same tenants services as ``tenants/api.py``, as the signed-in member; each
page offers only what the member's role may do, and the services refuse a forged request
anyway (its error re-renders the page with the service's status). A secret made here (an
API key's, an invitation's link) is in the one response that made it, never stored.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import URLPattern, path, reverse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_http_methods, require_POST

from console import mail
from console.forms.organization import (
    ApiKeyForm,
    InvitationForm,
    ProjectForm,
    RoleForm,
    role_choices,
)
from console.forms.positions import check_position
from console.guard import ConsoleRequest, signed_in
from console.selectors import audit as audit_selectors
from console.selectors import organization as selectors
from neocloud.core.errors import ApplicationError
from neocloud.core.transactions import atomic_with_retry
from tenants import services
from tenants.access import ROLE_SCOPES, Action
from tenants.models import ApiKey, Invitation, Membership, Organization, Role, Scope

AREA = Action.MEMBER_READ
# The roles a membership's selected projects limit (owners, admins and billing see all).
LIMITED_ROLES = (Role.MEMBER, Role.VIEWER)


def _require(request: ConsoleRequest, action: Action) -> Organization:
    """The current organization, if the member may do ``action`` there (else a 403)."""
    organization = request.console.organization
    if organization is None or not request.console.can(action):
        raise PermissionDenied
    return organization


def _tabs(request: ConsoleRequest) -> dict[str, bool]:
    """Which of the organization's pages the member may open."""
    can = request.console.can
    return {
        "tab_projects": can(AREA),
        "tab_members": can(AREA),
        "tab_keys": can(Action.API_KEY_OWN),
        "tab_audit": can(Action.AUDIT_READ),
    }


def _page(
    request: ConsoleRequest, template: str, context: dict[str, Any], status: int = 200
) -> HttpResponse:
    return render(
        request, f"console/organization/{template}", _tabs(request) | context, status=status
    )


def _error_status(error: ApplicationError) -> int:
    return error.http_status if 400 <= error.http_status < 500 else 400


def _show_error(form: Any, error: ApplicationError) -> None:
    """A service's refusal on its form: on the fields it names, else for the whole form."""
    placed = False
    for field, problems in error.fields.items():
        if field in form.fields:
            form.add_error(field, f"{error.message} ({', '.join(problems)})")
            placed = True
    if not placed:
        form.add_error(None, error.message)


# --- projects -------------------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
@signed_in
def projects(request: ConsoleRequest) -> HttpResponse:
    """The projects the member sees; managers create one here."""
    organization = _require(request, AREA)
    console = request.console
    may_create = console.can(Action.PROJECT_WRITE)
    form = ProjectForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            project = atomic_with_retry(
                services.project_create,
                actor=console.actor,
                organization=organization,
                **form.cleaned_data,
            )
        except ApplicationError as error:
            _show_error(form, error)
            status = _error_status(error)
        else:
            messages.success(request, f"Project {project.name} created.")
            return redirect("console:organization")
    else:
        status = 400 if request.method == "POST" else 200
    context = {"projects": selectors.projects(console), "may_create": may_create, "form": form}
    return _page(request, "projects.html", context, status)


# --- members and invitations ----------------------------------------------------------------


def _members_page(
    request: ConsoleRequest,
    *,
    invite: InvitationForm | None = None,
    error: str = "",
    invited: tuple[Invitation, str, bool] | None = None,
    status: int = 200,
) -> HttpResponse:
    console = request.console
    manage = console.can(Action.MEMBER_MANAGE)
    roles = _grantable_roles(request)
    context = {
        "members": selectors.members(console),
        "limited_roles": LIMITED_ROLES,
        "manage_members": manage,
        "manage_owners": console.can(Action.OWNER_MANAGE),
        "roles": role_choices(roles),
        "invitations": selectors.invitations_pending(console) if manage else [],
        "invite": (invite or _invitation_form(request)) if manage else None,
        "error": error,
        "invited": invited,
    }
    response = _page(request, "members.html", context, status)
    if invited is not None:
        add_never_cache_headers(response)
    return response


def _grantable_roles(request: ConsoleRequest) -> list[str]:
    """Roles the member may hand out: owners (``owner.manage``) every one, others all but
    owner."""
    if request.console.can(Action.OWNER_MANAGE):
        return list(Role)
    return [role for role in Role if role != Role.OWNER]


def _invitation_form(request: ConsoleRequest, data: Any = None) -> InvitationForm:
    return InvitationForm(
        data,
        roles=_grantable_roles(request),
        projects=selectors.projects(request.console),
    )


@require_http_methods(["GET", "POST"])
@signed_in
def members(request: ConsoleRequest) -> HttpResponse:
    """Members and their roles; managers see pending invitations and invite (POST): the
    invitation's link is e-mailed and shown here once."""
    organization = _require(request, AREA)
    if request.method == "GET":
        return _members_page(request)
    console = request.console
    form = _invitation_form(request, request.POST)
    if not form.is_valid():
        return _members_page(request, invite=form, status=400)
    try:
        invitation, token = atomic_with_retry(
            services.invitation_create,
            actor=console.actor,
            organization=organization,
            email=form.cleaned_data["email"],
            role=form.cleaned_data["role"],
            projects_scope=form.cleaned_data["projects_scope"],
            project_ids=[p.pk for p in form.cleaned_data["projects"]],
        )
    except ApplicationError as error:
        _show_error(form, error)
        return _members_page(request, invite=form, status=_error_status(error))
    link = request.build_absolute_uri(reverse("console:invitation", args=[token]))
    sent = mail.invitation_send(invitation=invitation, link=link, inviter=console.user)
    return _members_page(request, invited=(invitation, link, sent), status=201)


@require_POST
@signed_in
def member_role(request: ConsoleRequest, member_id: str) -> HttpResponse:
    membership = request.console.one(
        Membership.objects.select_related("organization", "user"), AREA, member_id
    )
    form = RoleForm(request.POST, roles=list(Role))
    if not form.is_valid():
        return _members_page(request, error="Choose a role.", status=400)
    try:
        atomic_with_retry(
            services.member_change_role,
            actor=request.console.actor,
            membership=membership,
            role=form.cleaned_data["role"],
        )
    except ApplicationError as error:
        return _members_page(request, error=error.message, status=_error_status(error))
    messages.success(request, f"{membership.user.email} is now {form.cleaned_data['role']}.")
    return redirect("console:members")


@require_POST
@signed_in
def member_remove(request: ConsoleRequest, member_id: str) -> HttpResponse:
    """Remove a member (or oneself: leaving); their keys in the organization are revoked."""
    membership = request.console.one(
        Membership.objects.select_related("organization", "user"), AREA, member_id
    )
    try:
        atomic_with_retry(
            services.member_remove, actor=request.console.actor, membership=membership
        )
    except ApplicationError as error:
        return _members_page(request, error=error.message, status=_error_status(error))
    messages.success(request, f"{membership.user.email} was removed.")
    if membership.user_id == request.console.user.pk:
        return redirect("console:overview")
    return redirect("console:members")


@require_POST
@signed_in
def invitation_revoke(request: ConsoleRequest, invitation_id: str) -> HttpResponse:
    invitation = request.console.one(
        Invitation.objects.select_related("organization"), Action.MEMBER_MANAGE, invitation_id
    )
    try:
        atomic_with_retry(
            services.invitation_revoke, actor=request.console.actor, invitation=invitation
        )
    except ApplicationError as error:
        return _members_page(request, error=error.message, status=_error_status(error))
    messages.success(request, f"The invitation for {invitation.email} was revoked.")
    return redirect("console:members")


# --- API keys -------------------------------------------------------------------------------


def _key_form(request: ConsoleRequest, data: Any = None) -> ApiKeyForm:
    allowed = ROLE_SCOPES.get(request.console.role or "", frozenset())
    return ApiKeyForm(
        data,
        scopes=[scope for scope in Scope if scope in allowed],
        projects=selectors.projects(request.console),
    )


def _keys_page(
    request: ConsoleRequest,
    *,
    form: ApiKeyForm | None = None,
    error: str = "",
    created: tuple[ApiKey, str] | None = None,
    status: int = 200,
) -> HttpResponse:
    console = request.console
    context = {
        "keys": selectors.api_keys(console),
        "me": console.user,
        "manage_keys": console.can(Action.API_KEY_MANAGE),
        "form": form or _key_form(request),
        "error": error,
        "created": created,
    }
    response = _page(request, "keys.html", context, status)
    if created is not None:
        add_never_cache_headers(response)  # the secret is in this response only
    return response


@require_http_methods(["GET", "POST"])
@signed_in
def api_keys(request: ConsoleRequest) -> HttpResponse:
    """The member's keys (managers: every key of the organization); a new key's secret is
    shown in the response that made it, once."""
    organization = _require(request, Action.API_KEY_OWN)
    if request.method == "GET":
        return _keys_page(request)
    console = request.console
    form = _key_form(request, request.POST)
    if not form.is_valid():
        return _keys_page(request, form=form, status=400)
    try:
        api_key, secret = atomic_with_retry(
            services.api_key_create,
            actor=console.actor,
            organization=organization,
            name=form.cleaned_data["name"],
            scopes=form.cleaned_data["scopes"],
            project=form.cleaned_data["project"],
        )
    except ApplicationError as error:
        _show_error(form, error)
        return _keys_page(request, form=form, status=_error_status(error))
    return _keys_page(request, created=(api_key, secret), status=201)


@require_POST
@signed_in
def api_key_revoke(request: ConsoleRequest, key_id: str) -> HttpResponse:
    shown = selectors.api_keys(request.console).select_related("organization")
    api_key = request.console.one(shown, Action.API_KEY_READ, key_id)
    try:
        atomic_with_retry(services.api_key_revoke, actor=request.console.actor, api_key=api_key)
    except ApplicationError as error:
        return _keys_page(request, error=error.message, status=_error_status(error))
    messages.success(request, f"The API key {api_key.name} ({api_key.prefix}) was revoked.")
    return redirect("console:api-keys")


# --- the audit feed -------------------------------------------------------------------------


@signed_in
def audit(request: ConsoleRequest) -> HttpResponse:
    """The organization's audit feed in words, newest first, a page at a time."""
    _require(request, Action.AUDIT_READ)
    before = request.GET.get("before", "")
    position = check_position(before) if before else None
    page = audit_selectors.audit_page(request.console, position)
    if before and position is None:
        error = "No such place in the feed: the newest events are shown."
        return _page(request, "audit.html", {"page": page, "error": error}, status=400)
    return _page(request, "audit.html", {"page": page})


urlpatterns: list[URLPattern] = [
    path("organization", projects, name="organization"),
    path("organization/members", members, name="members"),
    path("organization/members/<str:member_id>/role", member_role, name="member-role"),
    path("organization/members/<str:member_id>/remove", member_remove, name="member-remove"),
    path(
        "organization/invitations/<str:invitation_id>/revoke",
        invitation_revoke,
        name="invitation-revoke",
    ),
    path("organization/keys", api_keys, name="api-keys"),
    path("organization/keys/<str:key_id>/revoke", api_key_revoke, name="api-key-revoke"),
    path("organization/audit", audit, name="audit"),
]
