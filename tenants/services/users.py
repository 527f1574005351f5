"""Users: each its own stream (``user/<id>``); the password goes to the user table only.

An address is verified by a link mailed to it: a signed, timestamped token of the user's id
and address (``EMAIL_VERIFICATION_MAX_AGE_S``), so it needs no table and a changed address
invalidates it.

Concurrency: two registrations of one e-mail address race to the user table's unique e-mail,
and the second fails there. An update appends whatever the stream's version (``store.ANY``):
the last operator's change wins, and no rule spans a user's events.
"""

from __future__ import annotations

from django.conf import settings
from django.core import signing
from django.utils import timezone

from events import store
from events.store import NO_STREAM
from neocloud.core.errors import ValidationFailed
from tenants import events as ev
from tenants import selectors
from tenants.access import Action, Actor
from tenants.errors import VerificationLinkInvalid
from tenants.models import User

VERIFICATION_SALT = "neocloud.tenants.email-verification"


def user_register(
    *,
    actor: Actor,
    email: str,
    full_name: str = "",
    password: str | None = None,
    is_staff: bool = False,
    email_verified: bool = True,
) -> User:
    """A new user. The password goes to the user table only, never into the log.
    ``email_verified`` False (self sign-up): the user may read only until they follow the
    link mailed to them (``user_email_verify``)."""
    email = User.objects.normalize_email(email).lower()
    if selectors.user_find(email=email) is not None:
        raise ValidationFailed("a user with this e-mail exists", fields={"email": ["taken"]})
    user = User.objects.create_user(
        email,
        password,
        full_name=full_name,
        is_staff=is_staff,
        email_verified_at=timezone.now() if email_verified else None,
    )
    store.append(
        ev.USER_STREAM,
        str(user.pk),
        [
            ev.UserRegistered(
                user_id=user.pk,
                email=email,
                full_name=full_name,
                is_staff=is_staff,
                email_verified=email_verified,
            )
        ],
        expected_version=NO_STREAM,
        metadata=actor.metadata(),
    )
    return user


def email_verification_token(user: User) -> str:
    """The token of the user's verification link (a credential: it goes in the mail only)."""
    return signing.dumps([str(user.pk), user.email], salt=VERIFICATION_SALT, compress=True)


def user_email_verify(*, actor: Actor, token: str) -> User:
    """Verify the address the link was mailed to, whoever follows it (signed in or not: the
    token is the proof). Following it again changes nothing."""
    try:
        user_id, email = signing.loads(
            token, salt=VERIFICATION_SALT, max_age=settings.EMAIL_VERIFICATION_MAX_AGE_S
        )
    except signing.SignatureExpired:
        raise VerificationLinkInvalid(
            "this verification link has expired: sign in and send a new one",
            fields={"token": ["expired"]},
        ) from None
    except (signing.BadSignature, ValueError, TypeError):
        raise VerificationLinkInvalid(
            "this verification link is not valid", fields={"token": ["invalid"]}
        ) from None
    user = User.objects.filter(pk=user_id, email=email).first()
    if user is None:
        raise VerificationLinkInvalid(
            "this verification link is not valid", fields={"token": ["invalid"]}
        )
    user_email_mark_verified(actor=actor, user=user)
    return user


def user_email_mark_verified(*, actor: Actor, user: User) -> None:
    """The user proved their address (a verification or invitation link mailed to it). Two
    at once: the conditional update lets one record it, the other changes nothing."""
    now = timezone.now()
    if User.objects.filter(pk=user.pk, email_verified_at__isnull=True).update(
        email_verified_at=now
    ):
        store.append(
            ev.USER_STREAM,
            str(user.pk),
            [ev.UserEmailVerified(email=user.email)],
            expected_version=store.ANY,
            metadata=actor.metadata(),
        )
    user.refresh_from_db(fields=["email_verified_at"])


def user_update(
    *, actor: Actor, user: User, full_name: str, is_staff: bool, is_active: bool
) -> User:
    """Operators change a user's name, operator rights or activity (deactivated: every key
    and session stops working)."""
    actor.require(Action.USER_MANAGE)
    User.objects.filter(pk=user.pk).update(
        full_name=full_name, is_staff=is_staff, is_active=is_active
    )
    store.append(
        ev.USER_STREAM,
        str(user.pk),
        [ev.UserUpdated(full_name=full_name, is_staff=is_staff, is_active=is_active)],
        expected_version=store.ANY,
        metadata=actor.metadata(),
    )
    return User.objects.get(pk=user.pk)


def user_get_or_register(*, actor: Actor, email: str) -> User:
    """The user with this e-mail address, registered (without a password) if new."""
    return selectors.user_find(email=email) or user_register(actor=actor, email=email)
