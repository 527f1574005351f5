"""A run's own OpenSSH server (issue 32): the distribution's ``sshd``, started by the shim
beside the command, as the run's uid, inside its cgroups (so a login counts against the run's
limits and sees only its GPUs), on a port of the node's ``--port-range``.

Nothing here runs as root beyond writing the files: the sshd is unprivileged, so it has no
privilege separation to do and can log in only its own user (``run``, named to it by
``nss_wrapper``: the run's uid has no passwd entry on the host). Password and
keyboard-interactive logins, agent and X11 forwarding, tunnels and remote forwarding are off;
a login may forward to local ports only (``AllowTcpForwarding local``), which reaches nothing
the run's own processes could not reach. Its keys are the members' of the run's project, kept
current by the agent from each assignments answer (``keys_write``, level-triggered).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from agent.state import RunRecord, write_atomic

SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = "/usr/bin/ssh-keygen"
USER = "run"  # the login name: ``ssh -p PORT run@node``
NSS_WRAPPER = ("/usr/lib/x86_64-linux-gnu/libnss_wrapper.so", "/usr/lib64/libnss_wrapper.so")
KEYS = "authorized_keys"
CONFIG = "sshd_config"


def available() -> str | None:
    """Why this node cannot give runs SSH, or None."""
    if not Path(SSHD).exists():
        return f"no {SSHD} on this node (apt-get install openssh-server)"
    if nss_wrapper() is None:
        return "no libnss_wrapper on this node (apt-get install libnss-wrapper)"
    return None


def nss_wrapper() -> str | None:
    return next((path for path in NSS_WRAPPER if Path(path).exists()), None)


def free_port(span: range, held: Iterable[int], listen: str = "") -> int | None:
    """The first port of ``span`` no run holds and nothing on the host listens on."""
    taken = set(held)
    return next((p for p in span if p not in taken and _bindable(listen, p)), None)


def _bindable(listen: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in listen else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((listen, port))
        except OSError:
            return False
    return True


def _quoted(name: str, value: str) -> str | None:
    """``NAME=value`` as sshd_config's ``SetEnv`` reads it; None when it cannot carry it."""
    if "\n" in value or "\r" in value or "\0" in value:
        return None
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{name}={escaped}"'


def prepare(
    directory: Path,
    *,
    uid: int | None,
    port: int,
    listen: str,
    home: str,
    env: Mapping[str, str],
    keys: list[str],
) -> list[str]:
    """Write the run's sshd files (host key made here, per run); the variables that could
    not be carried (a value with a newline), by name."""
    directory.mkdir(mode=0o700, exist_ok=True)
    host_key = directory / "host_ed25519_key"
    if not host_key.exists():
        subprocess.run(  # noqa: S603 - fixed argv
            [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(host_key)],
            check=True,
            capture_output=True,
        )
    run_uid = os.getuid() if uid is None else uid
    shell = "/bin/bash" if Path("/bin/bash").exists() else "/bin/sh"
    write_atomic(directory / "passwd", f"{USER}:x:{run_uid}:{run_uid}::{home}:{shell}\n".encode())
    write_atomic(directory / "group", f"{USER}:x:{run_uid}:\n".encode())
    carried = {name: _quoted(name, value) for name, value in sorted(env.items())}
    lines = [
        f"Port {port}",
        *([f"ListenAddress {listen}"] if listen else []),
        f"HostKey {host_key}",
        "PidFile none",
        f"AuthorizedKeysFile {directory / KEYS}",
        "StrictModes no",  # the files are the run uid's own, in a root-owned 0711 tree
        "UsePAM no",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin no",
        f"AllowUsers {USER}",
        "AllowAgentForwarding no",
        "X11Forwarding no",
        "PermitTunnel no",
        "GatewayPorts no",
        "AllowTcpForwarding local",
        "AllowStreamLocalForwarding no",
        "PermitUserEnvironment no",
        "PermitUserRC no",
        "PrintMotd no",
        "ClientAliveInterval 30",
        *([f"SetEnv {' '.join(v for v in carried.values() if v)}"] if env else []),
    ]
    write_atomic(directory / CONFIG, ("\n".join(lines) + "\n").encode())
    keys_write(directory, keys)
    if uid is not None:
        for path in [directory, *directory.iterdir()]:
            os.chown(path, uid, uid)
    return [name for name, value in carried.items() if value is None]


def keys_write(directory: Path, keys: list[str]) -> bool:
    """The run's ``authorized_keys`` as listed; whether it changed."""
    path = directory / KEYS
    text = "".join(f"{key}\n" for key in keys).encode()
    try:
        if path.read_bytes() == text:
            return False
    except FileNotFoundError:
        pass
    owner = directory.stat().st_uid
    write_atomic(path, text)
    os.chown(path, owner, owner)
    return True


def shim_options(directory: Path) -> list[str]:
    """What the shim needs to start the run's sshd beside the command."""
    return ["--sshd-config", str(directory / CONFIG), "--sshd-preload", nss_wrapper() or ""]


def sessions(sshd_pid: int, proc: Path = Path("/proc")) -> int:
    """The run's SSH connections: the children of its sshd (one per connection)."""
    count = 0
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == sshd_pid:
            count += 1
    return count


def idle_step(record: RunRecord, utilisation: Mapping[int, float], now: float) -> bool:
    """Advance the run's idle clock (a dev environment's): unused while it has no SSH
    connection and none of its GPUs is at or above its threshold. Whether it has been unused
    for its whole idle stop."""
    connected = record.sshd_pid is not None and sessions(record.sshd_pid) > 0
    computing = any(utilisation.get(i, 0.0) >= record.idle_gpu_pct for i in record.gpus)
    if connected or computing or record.idle_stop_s is None:
        record.idle_since = None
        return False
    if record.idle_since is None:
        record.idle_since = now
    return now - record.idle_since >= record.idle_stop_s


def remove(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)
