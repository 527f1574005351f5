"""Joining: the invitation a link's token opens (only the token's hash is kept)."""

from __future__ import annotations

from tenants import secrets, selectors
from tenants.models import Invitation


def invitation_for(token: str) -> Invitation | None:
    """The invitation of this token, in whatever state, with its organization; None for a
    token no invitation has."""
    invitation = selectors.invitation_find(token_hash=secrets.digest(token))
    if invitation is not None:
        invitation.organization  # noqa: B018 - loaded once here, shown by every page
    return invitation


def has_account(email: str) -> bool:
    return selectors.user_find(email=email) is not None
