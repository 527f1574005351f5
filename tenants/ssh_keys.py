"""SSH public keys checked before they are kept: parsed with ``cryptography``, of an
algorithm and size we accept, and never anything private (a pasted private key is refused
without its text reaching a message, an event or a log)."""

from __future__ import annotations

import base64
import hashlib
import warnings
from dataclasses import dataclass

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_ssh_public_key

MIN_RSA_BITS = 3072
MAX_PUBLIC_KEY_CHARS = 16 * 1024  # an RSA-16384 key is under 3 KiB; more is not a key
MAX_KEY_NAME = 100
# The headers a private key starts with (OpenSSH's, PEM's PKCS#1/#8, PuTTY's).
PRIVATE_MARKERS = ("PRIVATE KEY", "PuTTY-User-Key-File")
KEY_TYPE_PREFIXES = ("ssh-", "ecdsa-", "sk-")


@dataclass(frozen=True)
class PublicKey:
    """A checked key: ``text`` is ``<type> <base64>`` (the comment dropped, so one key is
    one text), ``fingerprint`` as ``ssh-keygen -lf`` prints it (``SHA256:…``)."""

    text: str
    algorithm: str
    bits: int
    fingerprint: str
    comment: str


class KeyProblem(ValueError):
    """Why a text is not a key we accept; ``reason`` is the field's stable code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def public_key_check(text: str) -> PublicKey:
    """The checked key of an ``authorized_keys``-style line, or KeyProblem (its message never
    quotes the input)."""
    text = text.strip()
    if any(marker in text for marker in PRIVATE_MARKERS):
        raise KeyProblem(
            "private_key",
            "this is a private key: paste the public one (the .pub file), and treat the "
            "private key you pasted as exposed",
        )
    if len(text) > MAX_PUBLIC_KEY_CHARS or not text:
        raise KeyProblem("not_a_key", "not an SSH public key")
    parts = text.split(None, 2)
    if len(parts) < 2:
        raise KeyProblem("not_a_key", "not an SSH public key (expected '<type> <base64>')")
    if not parts[0].startswith(KEY_TYPE_PREFIXES):
        raise KeyProblem("not_a_key", "not an SSH public key (expected '<type> <base64>')")
    try:
        with warnings.catch_warnings():  # DSA's deprecation: refused below anyway
            warnings.simplefilter("ignore")
            key = load_ssh_public_key(f"{parts[0]} {parts[1]}".encode())
    except UnsupportedAlgorithm:
        raise KeyProblem("algorithm", "keys of this type are not accepted") from None
    except ValueError:
        raise KeyProblem("not_a_key", "not an SSH public key") from None
    if isinstance(key, ed25519.Ed25519PublicKey):
        bits = 256
    elif isinstance(key, ec.EllipticCurvePublicKey):
        bits = key.curve.key_size
    elif isinstance(key, rsa.RSAPublicKey):
        bits = key.key_size
        if bits < MIN_RSA_BITS:
            raise KeyProblem("too_short", f"an RSA key needs at least {MIN_RSA_BITS} bits")
    else:
        raise KeyProblem("algorithm", "keys of this type are not accepted (ed25519, ECDSA, RSA)")
    blob = base64.b64decode(parts[1])
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return PublicKey(
        text=f"{parts[0]} {parts[1]}",
        algorithm=parts[0],
        bits=bits,
        fingerprint=f"SHA256:{digest}",
        comment=parts[2].strip() if len(parts) > 2 else "",
    )
