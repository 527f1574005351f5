"""Secrets handed out once (API keys, invitation tokens) and the hashes kept instead."""

from __future__ import annotations

import hashlib
import hmac
import secrets

API_KEY_PREFIX = "nc"


def digest(secret: str) -> str:
    """SHA-256 is enough: the secrets are 256-bit random, so there is nothing to brute-force."""
    return hashlib.sha256(secret.encode()).hexdigest()


def matches(secret: str, expected_digest: str) -> bool:
    return hmac.compare_digest(digest(secret), expected_digest)


def new_api_key() -> tuple[str, str]:
    """``(prefix, key)``: the key reads ``nc_<prefix>_<secret>``; the prefix stays visible."""
    prefix = secrets.token_hex(6)
    return prefix, f"{API_KEY_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"


def api_key_prefix(key: str) -> str | None:
    """The prefix of a well-formed key, else None."""
    parts = key.split("_", 2)
    if len(parts) != 3 or parts[0] != API_KEY_PREFIX or len(parts[1]) != 12:
        return None
    return parts[1]


def new_token() -> str:
    return secrets.token_urlsafe(32)
