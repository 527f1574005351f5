"""Users' SSH public keys (issue 32), each user's in their own stream (``user/<id>``).

Concurrency: the user's row is locked first, so two adds of one key queue and the second
finds the first (``SshKeyTaken``) instead of failing on the table's constraint.
"""

from __future__ import annotations

import uuid

from events import store
from neocloud.core.errors import ValidationFailed
from neocloud.core.transactions import row_lock
from tenants import events as ev
from tenants.access import Actor
from tenants.errors import PermissionDenied, SshKeyInvalid, SshKeyPrivate, SshKeyTaken
from tenants.models import SshKey, User
from tenants.ssh_keys import MAX_KEY_NAME, KeyProblem, public_key_check


def _owner(actor: Actor) -> User:
    if actor.user is None:
        raise PermissionDenied("SSH keys belong to a user")
    return row_lock(User.objects.all()).get(pk=actor.user.pk)


def ssh_key_add(*, actor: Actor, public_key: str, name: str = "") -> SshKey:
    """Register a public key for the acting user. A private key is refused with a message
    that does not quote it."""
    try:
        checked = public_key_check(public_key)
    except KeyProblem as problem:
        error = SshKeyPrivate if problem.reason == "private_key" else SshKeyInvalid
        raise error(str(problem), fields={"public_key": [problem.reason]}) from None
    name = (name or checked.comment or checked.fingerprint)[:MAX_KEY_NAME].strip()
    if not name:
        raise ValidationFailed("a key needs a name", fields={"name": ["required"]})
    user = _owner(actor)
    if SshKey.objects.filter(user=user, fingerprint=checked.fingerprint).exists():
        raise SshKeyTaken(
            f"you registered this key already ({checked.fingerprint})",
            fields={"public_key": ["taken"]},
        )
    ssh_key_id = uuid.uuid4()
    store.append(
        ev.USER_STREAM,
        str(user.pk),
        [
            ev.SshKeyAdded(
                ssh_key_id=ssh_key_id,
                name=name,
                public_key=checked.text,
                algorithm=checked.algorithm,
                bits=checked.bits,
                fingerprint=checked.fingerprint,
            )
        ],
        expected_version=store.ANY,
        metadata=actor.metadata(),
    )
    return SshKey.objects.get(pk=ssh_key_id)


def ssh_key_remove(*, actor: Actor, ssh_key: SshKey) -> None:
    """The key stops opening runs: each node's desired state no longer lists it."""
    user = _owner(actor)
    if ssh_key.user_id != user.pk:
        raise PermissionDenied("not your key")
    store.append(
        ev.USER_STREAM,
        str(user.pk),
        [ev.SshKeyRemoved(ssh_key_id=ssh_key.pk)],
        expected_version=store.ANY,
        metadata=actor.metadata(),
    )
