"""Making an account: by an invitation's link, or signing up with a new organization. The
password is checked by the validators of ``AUTH_PASSWORD_VALIDATORS`` against the person's
own e-mail and name too."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth import password_validation

from tenants.models import User


class AccountForm(forms.Form):
    full_name = forms.CharField(
        label="Your name", max_length=200, widget=forms.TextInput(attrs={"autocomplete": "name"})
    )
    password = forms.CharField(
        label="Password",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )
    password_again = forms.CharField(
        label="Password again",
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["password"].help_text = " ".join(
            password_validation.password_validators_help_texts()
        )

    def email(self) -> str:
        """The account's e-mail address, for the password's similarity check."""
        raise NotImplementedError

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        password = cleaned.get("password")
        if password and password != cleaned.get("password_again"):
            self.add_error("password_again", "The two passwords differ.")
        elif password:
            person = User(email=self.email(), full_name=cleaned.get("full_name", ""))
            try:
                password_validation.validate_password(password, person)
            except forms.ValidationError as error:
                self.add_error("password", error)
        return cleaned


class JoinForm(AccountForm):
    """An account for an invited e-mail address (the invitation's: not asked)."""

    def __init__(self, *args: Any, email: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._email = email

    def email(self) -> str:
        return self._email


class SignUpForm(AccountForm):
    """A new user and their own organization."""

    organization = forms.CharField(label="Organization name", max_length=200)
    email_address = forms.EmailField(
        label="E-mail", max_length=254, widget=forms.EmailInput(attrs={"autocomplete": "email"})
    )
    field_order = ["organization", "full_name", "email_address", "password", "password_again"]

    def email(self) -> str:
        return str(self.cleaned_data.get("email_address", ""))
