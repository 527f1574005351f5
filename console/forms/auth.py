"""Signing in (the e-mail is the user name) and resetting a password."""

from __future__ import annotations

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.forms import PasswordResetForm as DjangoPasswordResetForm

from tenants import selectors
from tenants.models import User


class SignInForm(AuthenticationForm):
    username = forms.EmailField(
        label="E-mail", widget=forms.EmailInput(attrs={"autofocus": True, "autocomplete": "email"})
    )


class PasswordResetForm(DjangoPasswordResetForm):
    """Django's skips users without a usable password, so an owner made by
    ``create_organization`` could never open the console: they set theirs here."""

    def get_users(self, email: str) -> list[User]:
        return selectors.users_to_reset(email=email)
