"""Signing in and out, and passwords: Django's own views with the console's templates. Failed
sign-ins are counted by django-axes (``AXES_*`` settings), which locks the address and e-mail
out for a while."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth
from django.contrib.auth.forms import PasswordResetForm as DjangoPasswordResetForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse_lazy

from console.forms.auth import PasswordResetForm, SignInForm
from neocloud.core import ratelimit
from neocloud.core.addresses import client_address


class SignIn(auth.LoginView):
    template_name = "console/sign_in.html"
    authentication_form = SignInForm
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), "signup": settings.CONSOLE_SIGNUP_ENABLED}


class SignOut(auth.LogoutView):
    next_page = "console:sign-in"


class PasswordReset(auth.PasswordResetView):
    """Each reset sends mail: bounded per caller and per e-mail address, an hour at a time
    (``PASSWORD_RESETS_PER_HOUR``, ``PASSWORD_RESETS_PER_EMAIL_PER_HOUR``)."""

    form_class = PasswordResetForm
    template_name = "console/password_reset.html"
    email_template_name = "console/email/password_reset.txt"
    subject_template_name = "console/email/password_reset_subject.txt"
    success_url = reverse_lazy("console:password-reset-sent")

    def form_valid(self, form: DjangoPasswordResetForm) -> HttpResponse:
        email = form.cleaned_data["email"].lower()
        caller = ratelimit.allow(
            "password-reset",
            client_address(self.request),
            limit=settings.PASSWORD_RESETS_PER_HOUR,
            window_s=3600,
        )
        address = ratelimit.allow(
            "password-reset-email",
            email,
            limit=settings.PASSWORD_RESETS_PER_EMAIL_PER_HOUR,
            window_s=3600,
        )
        if not (caller and address):
            form.add_error(None, "Too many password resets: try again in an hour.")
            return self.render_to_response(self.get_context_data(form=form), status=429)
        return super().form_valid(form)


class PasswordResetSent(auth.PasswordResetDoneView):
    template_name = "console/password_reset_sent.html"


class PasswordResetConfirm(auth.PasswordResetConfirmView):
    template_name = "console/password_reset_confirm.html"
    success_url = reverse_lazy("console:password-reset-complete")


class PasswordResetComplete(auth.PasswordResetCompleteView):
    template_name = "console/password_reset_complete.html"


def root(request: HttpRequest) -> HttpResponse:
    """Signed in: the overview; else the sign-in page."""
    if request.user.is_authenticated:
        return redirect("console:overview")
    return redirect("console:sign-in")
