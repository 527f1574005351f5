"""Users: each its own stream (``user/<id>``); the password goes to the user table only.

Concurrency: two registrations of one e-mail address race to the user table's unique e-mail,
and the second fails there. An update appends whatever the stream's version (``store.ANY``):
the last operator's change wins, and no rule spans a user's events.
"""

from __future__ import annotations

from events import store
from events.store import NO_STREAM
from neocloud.core.errors import ValidationFailed
from tenants import events as ev
from tenants import selectors
from tenants.access import Action, Actor
from tenants.models import User


def user_register(
    *,
    actor: Actor,
    email: str,
    full_name: str = "",
    password: str | None = None,
    is_staff: bool = False,
) -> User:
    """A new user. The password goes to the user table only, never into the log."""
    email = User.objects.normalize_email(email).lower()
    if selectors.user_find(email=email) is not None:
        raise ValidationFailed("a user with this e-mail exists", fields={"email": ["taken"]})
    user = User.objects.create_user(email, password, full_name=full_name, is_staff=is_staff)
    store.append(
        ev.USER_STREAM,
        str(user.pk),
        [ev.UserRegistered(user_id=user.pk, email=email, full_name=full_name, is_staff=is_staff)],
        expected_version=NO_STREAM,
        metadata=actor.metadata(),
    )
    return user


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
