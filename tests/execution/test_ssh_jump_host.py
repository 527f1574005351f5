"""The jump host (issue 32), for real: the gateway's OpenSSH (root, as on a gateway host)
asks ``manage.py ssh_authorized_keys`` about each offered key, so ``ssh -J`` through it
reaches a run's sshd (made by ``agent.ssh`` as the agent does) for its project's members'
keys, and another organization's key gets nowhere. Root only (a second sshd, run uids)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from agent import ssh
from scheduler.models import Workload
from scheduler.specs import WorkloadKind
from tests.builders import Builder
from tests.execution.conftest import Agent, Customer, customer_of, submit
from tests.execution.test_ssh_access import add_key, owner_of, public_key

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres,
    pytest.mark.skipif(os.geteuid() != 0, reason="a gateway sshd and run uids need root"),
    pytest.mark.skipif(ssh.available() is not None, reason=str(ssh.available())),
]
ROOT = Path(__file__).resolve().parents[2]
RUN_UID = 4_099_990


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def place() -> Iterator[Path]:
    """A root-owned 0755 folder outside sticky /tmp: sshd refuses an AuthorizedKeysCommand
    under a folder others may write to."""
    folder = Path(f"/run/neocloud-test-jump-{os.getpid()}")
    folder.mkdir(mode=0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def start(argv: list[str], port: int, **kwargs: object) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)  # type: ignore[call-overload]
    deadline = time.monotonic() + 10
    while not listening(port):
        assert time.monotonic() < deadline, f"{argv[0]} not listening on {port}"
        time.sleep(0.05)
    return process  # type: ignore[no-any-return]


@pytest.fixture
def gateway(place: Path) -> Iterator[int]:
    """The gateway's sshd, configured as docs/operations/ssh.md says, on a port of its own;
    but the command runs as root, since this machine's Python is root's alone (a gateway
    runs it as a user of its own)."""
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    script = place / "neocloud-ssh-keys"
    script.write_text(
        "#!/bin/sh\n"
        f"cd {ROOT} && DJANGO_SETTINGS_MODULE=tests.settings DATABASE_URL={url} "
        f"REDIS_URL={os.environ.get('REDIS_URL', '')} PYTHONDONTWRITEBYTECODE=1 "
        f'exec {os.sys.executable} manage.py ssh_authorized_keys "$1" "$2"\n'  # type: ignore[attr-defined]
    )
    script.chmod(0o755)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(place / "host")], check=True
    )
    port = free_port()
    (place / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {place / 'host'}\nPidFile none\n"
        "AuthorizedKeysFile none\n"
        f"AuthorizedKeysCommand {script} %t %k\nAuthorizedKeysCommandUser root\n"
        "AllowUsers nobody\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PermitRootLogin no\nAllowTcpForwarding local\nPermitTTY no\nForceCommand /bin/false\n"
        "X11Forwarding no\nAllowAgentForwarding no\nPermitTunnel no\nUsePAM no\n"
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    process = start(["/usr/sbin/sshd", "-D", "-f", str(place / "sshd_config")], port)
    yield port
    process.terminate()
    process.wait()


@pytest.fixture
def run_sshd(place: Path) -> Iterator[tuple[int, Path]]:
    """A run's sshd on the 'node' (this machine), made by ``agent.ssh`` as the agent makes it,
    open to the keys written to it later."""
    node = place / "node"
    node.mkdir(mode=0o711)
    home = node / "work"
    home.mkdir(mode=0o700)
    os.chown(home, RUN_UID, RUN_UID)
    port = free_port()
    directory = node / "ssh"
    ssh.prepare(
        directory, uid=RUN_UID, port=port, listen="127.0.0.1", home=str(home), env={}, keys=[]
    )
    env = {
        "LD_PRELOAD": ssh.nss_wrapper() or "",
        "NSS_WRAPPER_PASSWD": str(directory / "passwd"),
        "NSS_WRAPPER_GROUP": str(directory / "group"),
    }
    argv = [ssh.SSHD, "-D", "-f", str(directory / ssh.CONFIG), "-E", str(directory / "log")]
    process = start(argv, port, env=env, user=RUN_UID, group=RUN_UID, extra_groups=[])
    yield port, directory
    process.terminate()
    process.wait()


def through(gateway: int, port: int, key: Path) -> subprocess.CompletedProcess[str]:
    """``ssh -J`` spelled out (``-J`` would not pass the key file on to the jump)."""
    options = [
        "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
        "-o", "UserKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes", "-i", str(key),
    ]  # fmt: skip
    jump = " ".join(["ssh", *options, "-p", str(gateway), "-W", "%h:%p", "nobody@127.0.0.1"])
    target = f"{ssh.USER}@127.0.0.1"
    return subprocess.run(
        ["ssh", *options, "-o", f"ProxyCommand={jump}", "-p", str(port), target, "id -u"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_a_member_reaches_their_run_through_the_jump_host_and_another_key_does_not(
    agents: list[Agent],
    acme: Customer,
    build: Builder,
    tmp_path: Path,
    gateway: int,
    run_sshd: tuple[int, Path],
) -> None:
    port, directory = run_sshd
    mine, theirs = public_key(tmp_path, "mine"), public_key(tmp_path, "theirs")
    add_key(owner_of(acme), mine)
    globex = customer_of(build, "Globex")
    add_key(owner_of(globex), theirs)
    ssh.keys_write(directory, [" ".join(mine.split()[:2]), " ".join(theirs.split()[:2])])
    submit(acme, kind=WorkloadKind.SERVICE, ssh=True)
    (agent, assignment) = next((a, x) for a in agents for x in a.assignments()["assignments"])
    agent.report(assignment["id"], "started", pid=1)
    ssh_endpoint = {"port": port, "address": f"127.0.0.1:{port}", "kind": "ssh"}
    agent.report(assignment["id"], "ports", ports=[ssh_endpoint])
    assert Workload.objects.get(project=acme.project).endpoints[0]["kind"] == "ssh"

    reached = through(gateway, port, tmp_path / "mine")
    refused = through(gateway, port, tmp_path / "theirs")

    assert reached.returncode == 0, reached.stderr
    assert reached.stdout.strip() == str(RUN_UID)
    # The run's own sshd would take this key (written above): the gateway stops it.
    assert refused.returncode == 255
    assert "Permission denied" in refused.stderr
