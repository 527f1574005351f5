"""SSH public keys (issue 32): a user registers theirs (ed25519, ECDSA, RSA >= 3072), sees
the fingerprint ``ssh-keygen -lf`` prints, and they are authorized on the runs of the projects
they may run work in. Bad input is a 400 on ``public_key``; a private key is kept nowhere."""

from __future__ import annotations

import logging
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from events.replay import projections_replay
from neocloud.models import IdempotencyRecord
from tenants import selectors
from tenants.models import Organization, Project, ProjectsScope, Role, SshKey, User
from tests.builders import Builder, client_with_key

pytestmark = pytest.mark.django_db


def keygen(tmp_path: Path, kind: str, bits: int | None = None, name: str = "k") -> Path:
    """A fresh key pair made by ssh-keygen; the private key's path."""
    path = tmp_path / f"{name}-{kind}-{bits}"
    argv = ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", f"{name}@test", "-f", str(path)]
    if bits:
        argv += ["-b", str(bits)]
    subprocess.run(argv, check=True)
    return path


def fingerprint(path: Path) -> str:
    out = subprocess.run(
        ["ssh-keygen", "-lf", f"{path}.pub"], check=True, capture_output=True, text=True
    )
    return out.stdout.split()[1]


@pytest.fixture
def org(build: Builder) -> Organization:
    return build.organization("Acme", owner=build.user())


def secret_for(
    build: Builder, org: Organization, role: str = Role.MEMBER, **kw: Any
) -> tuple[User, str]:
    member = build.member(org, role, **kw)
    return member.user, build.key(org, member.user)[1]


@pytest.mark.parametrize(
    ("kind", "bits"),
    [("ed25519", None), ("ecdsa", 256), ("ecdsa", 521), ("rsa", 3072)],
    ids=["ed25519", "ecdsa-256", "ecdsa-521", "rsa-3072"],
)
def test_a_key_is_registered_with_ssh_keygens_fingerprint(
    build: Builder, org: Organization, tmp_path: Path, kind: str, bits: int | None
) -> None:
    _user, secret = secret_for(build, org)
    path = keygen(tmp_path, kind, bits)

    response = client_with_key(secret).post(
        "/api/v1/ssh-keys", {"public_key": Path(f"{path}.pub").read_text()}, format="json"
    )

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["fingerprint"] == fingerprint(path)
    assert body["name"] == "k@test"
    assert body["public_key"] == " ".join(Path(f"{path}.pub").read_text().split()[:2])
    listed = client_with_key(secret).get("/api/v1/ssh-keys").json()["results"]
    assert [k["id"] for k in listed] == [body["id"]]


@pytest.mark.parametrize(
    ("make", "code", "reason"),
    [
        (lambda p: "this is not a key", "ssh_key_invalid", "not_a_key"),
        (lambda p: "ssh-ed25519 AAAAnotbase64!!", "ssh_key_invalid", "not_a_key"),
        (lambda p: Path(f"{keygen(p, 'dsa')}.pub").read_text(), "ssh_key_invalid", "algorithm"),
        (
            lambda p: Path(f"{keygen(p, 'rsa', 2048)}.pub").read_text(),
            "ssh_key_invalid",
            "too_short",
        ),
        (lambda p: keygen(p, "ed25519").read_text(), "ssh_key_private", "private_key"),
    ],
    ids=["not-a-key", "bad-base64", "dsa", "rsa-2048", "private-key"],
)
def test_bad_keys_are_400_on_public_key_and_nothing_is_written(
    build: Builder,
    org: Organization,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    make: object,
    code: str,
    reason: str,
) -> None:
    user, secret = secret_for(build, org)
    text = make(tmp_path)  # type: ignore[operator]
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM events_event")
        (events_before,) = cursor.fetchone()

    with caplog.at_level(logging.DEBUG):
        response = client_with_key(secret).post(
            "/api/v1/ssh-keys", {"public_key": text}, format="json", HTTP_IDEMPOTENCY_KEY="k1"
        )

    assert response.status_code == 400
    body = response.json()["error"]
    assert body["code"] == code
    assert body["fields"] == {"public_key": [reason]}
    assert not SshKey.objects.filter(user=user).exists()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM events_event")
        assert cursor.fetchone() == (events_before,)
    # The text sent (a private key above all) is in no reply, stored reply or log line.
    body_line = text.strip().splitlines()[1] if "PRIVATE" in text else text.strip()
    assert body_line not in response.content.decode()
    assert not any(body_line in str(vars(r)) for r in IdempotencyRecord.objects.all())
    assert body_line not in caplog.text


def test_the_same_key_twice_is_a_conflict(
    build: Builder, org: Organization, tmp_path: Path
) -> None:
    _user, secret = secret_for(build, org)
    text = Path(f"{keygen(tmp_path, 'ed25519')}.pub").read_text()
    client = client_with_key(secret)
    assert client.post("/api/v1/ssh-keys", {"public_key": text}, format="json").status_code == 201

    again = client.post("/api/v1/ssh-keys", {"public_key": text}, format="json")

    assert again.status_code == 409
    assert again.json()["error"]["code"] == "ssh_key_taken"
    assert SshKey.objects.count() == 1


def test_a_user_sees_and_deletes_only_their_own_keys(
    build: Builder, org: Organization, tmp_path: Path
) -> None:
    _alice, alice = secret_for(build, org)
    _bob, bob = secret_for(build, org, Role.ADMIN)
    key = (
        client_with_key(alice)
        .post(
            "/api/v1/ssh-keys",
            {"public_key": Path(f"{keygen(tmp_path, 'ed25519')}.pub").read_text()},
            format="json",
        )
        .json()
    )

    assert client_with_key(bob).get("/api/v1/ssh-keys").json()["results"] == []
    assert client_with_key(bob).delete(f"/api/v1/ssh-keys/{key['id']}").status_code == 404
    assert client_with_key(alice).delete(f"/api/v1/ssh-keys/{key['id']}").status_code == 204
    assert not SshKey.objects.exists()


def test_keys_are_authorized_in_the_projects_their_user_may_run_work_in(
    build: Builder, org: Organization, tmp_path: Path
) -> None:
    mine = build.project(org, "Mine")
    other = build.project(org, "Other")
    elsewhere = build.organization("Globex", owner=build.user())
    _all, everywhere = secret_for(build, org)
    _sel, selected = secret_for(
        build, org, projects_scope=ProjectsScope.SELECTED, project_ids=[mine.pk]
    )
    _viewer, viewer = secret_for(build, org, Role.VIEWER)
    _out, outsider = secret_for(build, elsewhere)
    made = {}
    for label, secret in [
        ("all", everywhere),
        ("sel", selected),
        ("viewer", viewer),
        ("out", outsider),
    ]:
        made[label] = (
            client_with_key(secret)
            .post(
                "/api/v1/ssh-keys",
                {"public_key": Path(f"{keygen(tmp_path, 'ed25519', name=label)}.pub").read_text()},
                format="json",
            )
            .json()["fingerprint"]
        )

    authorized = selectors.ssh_keys_authorized(project_ids=[mine.pk, other.pk])

    def prints(project: Project) -> set[str]:
        return {k.fingerprint for k in authorized[project.pk]}

    assert prints(mine) == {made["all"], made["sel"]}
    assert prints(other) == {made["all"]}


def test_replaying_the_log_rebuilds_the_ssh_keys(
    build: Builder, org: Organization, tmp_path: Path
) -> None:
    _user, secret = secret_for(build, org)
    client = client_with_key(secret)
    kept = client.post(
        "/api/v1/ssh-keys",
        {"public_key": Path(f"{keygen(tmp_path, 'ed25519', name='a')}.pub").read_text()},
        format="json",
    ).json()
    gone = client.post(
        "/api/v1/ssh-keys",
        {"public_key": Path(f"{keygen(tmp_path, 'ecdsa', 384, name='b')}.pub").read_text()},
        format="json",
    ).json()
    client.delete(f"/api/v1/ssh-keys/{gone['id']}")
    live = list(SshKey.objects.values().order_by("pk"))

    projections_replay(names=["tenants.ssh_keys"])

    assert list(SshKey.objects.values().order_by("pk")) == live
    assert [row["id"] for row in live] == [uuid.UUID(kept["id"])]
