"""Signing in and out, and passwords: Django's own views with the console's templates. Failed
sign-ins are counted by django-axes (``AXES_*`` settings), which locks the address and e-mail
out for a while."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse_lazy

from console.forms.auth import PasswordResetForm, SignInForm


class SignIn(auth.LoginView):
    template_name = "console/sign_in.html"
    authentication_form = SignInForm
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {**super().get_context_data(**kwargs), "signup": settings.CONSOLE_SIGNUP_ENABLED}


class SignOut(auth.LogoutView):
    next_page = "console:sign-in"


class PasswordReset(auth.PasswordResetView):
    form_class = PasswordResetForm
    template_name = "console/password_reset.html"
    email_template_name = "console/email/password_reset.txt"
    subject_template_name = "console/email/password_reset_subject.txt"
    success_url = reverse_lazy("console:password-reset-sent")


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
