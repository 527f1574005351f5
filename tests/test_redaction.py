"""The one rule that keeps credentials out of the feeds and the permanent log: by field name,
at any depth."""

from __future__ import annotations

import pytest

from neocloud.core.redaction import REDACTED, is_credential, redact


@pytest.mark.parametrize(
    "name",
    [
        "password",
        "root_password",
        "password_hash",
        "key_hash",
        "token_hash",
        "token",
        "access_token",
        "refreshToken",
        "secret",
        "client_secret",
        "secret_key",
        "private_key",
        "ssh_private_key",
        "privateKey",
        "api_key",
        "apiKey",
        "credentials",
        "credential",
        "bmc-password",
        "authorization",
    ],
)
def test_credential_like_names_are_redacted(name: str) -> None:
    assert is_credential(name)


@pytest.mark.parametrize(
    "name",
    [
        "api_key_id",
        "credential_id",
        "token_id",
        "public_key_fingerprint",
        "token_expires_at",
        "prefix",
        "ssh_user",
        "server_id",
        "scopes",
        "idempotency_key",
        "reason",
    ],
)
def test_references_and_facts_stay(name: str) -> None:
    assert not is_credential(name)


def test_redaction_reaches_every_depth_and_leaves_the_input_alone() -> None:
    details = {
        "server_id": "srv-1",
        "bmc": {"user": "root", "password": "hunter2"},
        "keys": [{"name": "ops", "private_key": "-----BEGIN"}, "plain"],
        "credentials": {"user": "u", "token": "t"},
    }

    assert redact(details) == {
        "server_id": "srv-1",
        "bmc": {"user": "root", "password": REDACTED},
        "keys": [{"name": "ops", "private_key": REDACTED}, "plain"],
        "credentials": REDACTED,
    }
    assert details["bmc"] == {"user": "root", "password": "hunter2"}
