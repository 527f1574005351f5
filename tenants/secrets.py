"""Secrets handed out once (API keys, invitation tokens) and the hashes kept instead; and
project secrets, kept to be handed to workloads, so sealed (encrypted) rather than hashed."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from cryptography.fernet import Fernet, MultiFernet
from django.conf import settings

API_KEY_PREFIX = "nc"
# A project secret reaches a workload as the variable of its name: a POSIX name, and
# ``NEOCLOUD_*`` is kept for what the platform sets itself (workload variables share the rule).
VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RESERVED_VARIABLE_PREFIX = "NEOCLOUD_"
MAX_VARIABLE_NAME = 128
MAX_SECRET_VALUE_BYTES = 32 * 1024


def variable_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a variable, or None."""
    if not VARIABLE_NAME.fullmatch(name) or len(name) > MAX_VARIABLE_NAME:
        return f"{name!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*, at most 128)"
    if name.upper().startswith(RESERVED_VARIABLE_PREFIX):
        return f"{name!r}: names starting {RESERVED_VARIABLE_PREFIX} are reserved"
    return None


def _fernet() -> MultiFernet:
    """``SECRETS_KEYS``: the first key seals, every one opens (how a key is rotated)."""
    return MultiFernet([Fernet(key) for key in settings.SECRETS_KEYS])


def seal(value: str) -> str:
    return _fernet().encrypt(value.encode()).decode()


def unseal(token: str) -> str:
    return _fernet().decrypt(token.encode()).decode()


def reseal(token: str) -> str:
    """The same value sealed with the first key."""
    return _fernet().rotate(token.encode()).decode()


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
