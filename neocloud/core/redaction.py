"""Credentials kept out of what is shown and what is kept for good.

One rule, by field name, applied recursively to JSON-like data: the audit feeds redact event
data before a tenant sees it, and provisioning scrubs a driver's details before the permanent
log records them. Plain Python, so every app (``events`` included) may use it.

A name is credential-like when one of its words (split at ``_``, ``-``, ``.`` and camel case)
names a secret (``password``, ``secret``, ``token``, ``hash``, ``credentials``…) or it ends in
a known key name (``private_key``, ``api_key``…). References to a secret and facts about one
(``token_id``, ``credential_id``, ``api_key_id``, ``public_key_fingerprint``,
``token_expires_at``) are no secret and stay.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[redacted]"

SECRET_WORDS = frozenset(
    {
        "password",
        "passwd",
        "passphrase",
        "secret",
        "token",
        "hash",
        "credentials",
        "authorization",
        "cookie",
        "signature",
    }
)
SECRET_NAMES = (
    "private_key",
    "api_key",
    "apikey",
    "access_key",
    "secret_key",
    "signing_key",
    "ssh_key",
    "credential",
)
# A last word that makes the field a reference to a secret, or a fact about one.
REFERENCES = frozenset({"id", "ids", "prefix", "fingerprint", "type", "at", "count"})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[-.\s]+")


def is_credential(name: str) -> bool:
    """Whether a field called ``name`` holds a credential (or a hash of one)."""
    snake = _SEPARATORS.sub("_", _CAMEL.sub("_", name)).lower().strip("_")
    words = snake.split("_")
    if words[-1] in REFERENCES:
        return False
    if SECRET_WORDS.intersection(words):
        return True
    return any(snake == name or snake.endswith(f"_{name}") for name in SECRET_NAMES)


def redact(value: Any) -> Any:
    """``value`` with every credential-like field's value replaced by ``REDACTED``, at any
    depth of mappings and lists; the input is not changed."""
    if isinstance(value, dict):
        return {
            key: REDACTED if is_credential(str(key)) else redact(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(item) for item in value]
    return value
