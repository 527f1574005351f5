"""The console's SSH keys page (issue 32): a user adds, sees and removes their own keys; a
private key pasted is refused and nothing of it is shown back."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from django.test import Client

from tenants.models import SshKey
from tests.console.conftest import Member

pytestmark = pytest.mark.django_db


def keygen(tmp_path: Path) -> Path:
    path = tmp_path / "k"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "lap", "-f", str(path)], check=True
    )
    return path


def test_a_user_adds_sees_and_removes_a_key(member: Member, tmp_path: Path) -> None:
    client = Client()
    client.force_login(member.user)
    path = keygen(tmp_path)
    printed = subprocess.run(
        ["ssh-keygen", "-lf", f"{path}.pub"], capture_output=True, text=True, check=True
    )

    added = client.post(
        "/account/ssh-keys", {"public_key": Path(f"{path}.pub").read_text()}, follow=True
    )
    key = SshKey.objects.get(user=member.user)
    removed = client.post(f"/account/ssh-keys/{key.pk}/remove", follow=True)

    assert added.status_code == 200
    assert printed.stdout.split()[1] in added.content.decode()
    assert removed.status_code == 200
    assert not SshKey.objects.exists()


def test_a_private_key_is_refused_and_not_shown_back(member: Member, tmp_path: Path) -> None:
    client = Client()
    client.force_login(member.user)
    private = keygen(tmp_path).read_text()

    response = client.post("/account/ssh-keys", {"public_key": private})

    assert response.status_code == 400
    assert "ssh_key_private" in response.content.decode()
    assert private.splitlines()[1] not in response.content.decode()
    assert not SshKey.objects.exists()
