"""The shim: the leader of a run's session and process group, and the witness of its end.

The agent starts ``python -I .../agent/shim.py --status-file S --ready-file R -- argv...``
in a new session, with stdout and stderr on the run's output file. The shim spawns the
command, waits for it and writes how it ended to the status file. The run is not the agent's
child, so it survives the agent; a restarted agent (no longer anyone's parent here) reads the
ending from the status file.

The shim runs as the agent's user (root on a real node) with none of the run's variables in
its own environment: they come in a file only root can read (``--env-file``, removed once
read) and go to the command alone. With ``--uid`` the command runs as the run's own user,
with no supplementary groups, umask 077, no way to gain privileges (``no_new_privs``: setuid
programs do not elevate) and at most ``--nproc`` processes. The command's output reaches the
output file through the shim, which keeps at most ``--output-cap`` bytes of it: past the cap
the file only grows as a hole (no disk blocks), so its length still counts what was dropped.

Run as a script by path (not ``-m agent.shim``) so it needs nothing on ``sys.path`` in the
run's working directory: it imports only the standard library.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import resource
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _write_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as file:
        json.dump(data, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _start_time(pid: int) -> int:
    text = Path(f"/proc/{pid}/stat").read_text()
    return int(text.rpartition(")")[2].split()[19])


_PR_SET_NO_NEW_PRIVS = 38
_CLONE_NEWNS = 0x20000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT = 0x1, 0x2, 0x4, 0x20
_MS_BIND, _MS_REC, _MS_SLAVE = 0x1000, 0x4000, 0x80000
_MOUNT_ROOT = "/mnt"
_DRAIN_S = 2.0  # how long output is still read once the command ended (a child may hold it)
_READ_BYTES = 64 * 1024


def _join_cgroups(paths: list[str]) -> dict[str, Any]:
    if not paths:
        return {"applied": False, "note": ""}
    for path in paths:
        try:
            Path(path, "cgroup.procs").write_text(str(os.getpid()))
        except OSError as error:
            return {"applied": False, "note": f"could not join {path}: {error}"}
    return {"applied": True, "note": f"cgroups {' '.join(paths)}"}


def _read_env(path: str) -> dict[str, str] | None:
    """The command's environment, from a file that is removed once read."""
    if not path:
        return None
    try:
        with open(path) as file:
            env = json.load(file)
    finally:
        Path(path).unlink(missing_ok=True)
    return {str(name): str(value) for name, value in env.items()}


def _mount_volumes(mounts: list[list[str]]) -> None:
    """A mount namespace of the run's own, made in the shim (root) before the command starts:
    its /mnt a small tmpfs of its own (nothing is created on the host's), each volume's
    directory bound at its path, read-only ones remounted so. Host mounts still reach it
    (rslave), none of its own reach the host. Whatever else serves the run later (its sshd)
    joins this namespace through ``/proc/<shim pid>/ns/mnt`` (the pid is in the ready file)."""
    libc = ctypes.CDLL(None, use_errno=True)

    def mount(source: str | None, target: str, kind: str | None, flags: int, data: str) -> None:
        encoded = [None if s is None else s.encode() for s in (source, target, kind, data)]
        if libc.mount(encoded[0], encoded[1], encoded[2], flags, encoded[3]) != 0:
            raise OSError(ctypes.get_errno(), f"mount {source} on {target}")

    if libc.unshare(_CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    mount(None, "/", None, _MS_REC | _MS_SLAVE, "")
    mount("tmpfs", _MOUNT_ROOT, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=64k")
    for host_dir, path, mode in mounts:
        os.makedirs(path, mode=0o755, exist_ok=True)
        mount(host_dir, path, None, _MS_BIND, "")
        locked = _MS_BIND | _MS_REMOUNT | _MS_NOSUID | _MS_NODEV
        mount(None, path, None, locked | (_MS_RDONLY if mode == "ro" else 0), "")


def _confine(nproc: int) -> None:
    """In the command's process, after it became the run's user, before exec."""
    if nproc > 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")


class _Relay:
    """Copies the command's output to the shim's stdout (the output file), up to ``cap``."""

    def __init__(self, source: int, cap: int) -> None:
        self.source = source
        self.cap = cap
        self.out = sys.stdout.fileno()
        self.written = os.fstat(self.out).st_size  # the shim's own lines count too

    def pump(self, timeout: float) -> bool:
        """Copy what is there within ``timeout``; False once the output is closed."""
        ready, _, _ = select.select([self.source], [], [], timeout)
        if not ready:
            return True
        data = os.read(self.source, _READ_BYTES)
        if not data:
            return False
        kept = data if self.cap <= 0 else data[: max(0, self.cap - self.written)]
        if kept:
            os.write(self.out, kept)
        self.written += len(data)
        if len(kept) < len(data):
            os.ftruncate(self.out, self.written)  # a hole: the length counts, no blocks
        return True

    def drain(self, child: subprocess.Popen[bytes]) -> None:
        while child.poll() is None:
            self.pump(0.2)
        deadline = time.monotonic() + _DRAIN_S
        while time.monotonic() < deadline and self.pump(max(0.0, deadline - time.monotonic())):
            continue


def _outlive_stop(signum: int, frame: object) -> None:
    """SIGTERM to the group is for the command: the shim stays to write down its end."""


def _sshd(args: argparse.Namespace, user: dict[str, Any]) -> subprocess.Popen[bytes] | None:
    """The run's sshd (issue 32), in the shim's cgroups and process group, as the run's user:
    ``nss_wrapper`` names that uid to it (no passwd entry on the host), its log beside its
    config. It ends with the command."""
    if not args.sshd_config:
        return None
    directory = Path(args.sshd_config).parent
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "LD_PRELOAD": args.sshd_preload,
        "NSS_WRAPPER_PASSWD": str(directory / "passwd"),
        "NSS_WRAPPER_GROUP": str(directory / "group"),
    }
    return subprocess.Popen(  # noqa: S603 - the distribution's sshd, fixed arguments
        ["/usr/sbin/sshd", "-D", "-f", args.sshd_config, "-E", str(directory / "sshd.log")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        preexec_fn=(lambda: _confine(args.nproc)) if user else None,
        **user,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agent.shim")
    parser.add_argument("--status-file", required=True, type=Path)
    parser.add_argument("--ready-file", required=True, type=Path)
    parser.add_argument("--cgroup", action="append", default=[])
    parser.add_argument("--env-file", default="")
    parser.add_argument("--uid", type=int, default=-1)
    parser.add_argument("--nproc", type=int, default=0)
    parser.add_argument("--output-cap", type=int, default=0)
    parser.add_argument("--mount", nargs=3, action="append", default=[])  # HOST PATH ro|rw
    parser.add_argument("--group", type=int, action="append", default=[])
    parser.add_argument("--sshd-config", default="")  # issue 32: the run's own sshd
    parser.add_argument("--sshd-preload", default="")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    # A Python handler, not SIG_IGN: handlers are reset by exec, so the command gets the
    # default action back while an ignored signal would stay ignored in it.
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _outlive_stop)
    cgroup = _join_cgroups(args.cgroup)
    reader, writer = os.pipe()
    user: dict[str, Any] = {}
    if args.uid >= 0:
        # With volumes, 007: the volume's group (its project's runs) may use what it writes.
        umask = 0o007 if args.mount else 0o077
        user = {"user": args.uid, "group": args.uid, "extra_groups": args.group, "umask": umask}
    sshd = None
    try:
        env = _read_env(args.env_file)
        if args.mount:  # before the sshd: its logins see the run's volumes too
            _mount_volumes(args.mount)
        sshd = _sshd(args, user)
        child = subprocess.Popen(  # noqa: S603 - the run
            command,
            stdin=subprocess.DEVNULL,
            stdout=writer,
            stderr=writer,
            env=env,
            # preexec_fn is safe here: the shim has one thread.
            preexec_fn=(lambda: _confine(args.nproc)) if user else None,
            **user,
        )
    except (OSError, ValueError, subprocess.SubprocessError) as error:
        if sshd is not None:
            sshd.kill()
        message = f"cannot start {command[:1]}: {error}"
        print(f"neocloud shim: {message}", file=sys.stderr, flush=True)
        _write_atomic(args.status_file, {"error": message, "at": _now()})
        return 127
    _write_atomic(
        args.ready_file,
        {
            "pid": os.getpid(),
            "start_time": _start_time(os.getpid()),
            "child_pid": child.pid,
            "sshd_pid": sshd.pid if sshd else None,
            "cgroup": cgroup,
            "at": _now(),
        },
    )
    os.close(writer)
    _Relay(reader, args.output_cap).drain(child)
    code = child.wait()
    if sshd is not None:
        sshd.terminate()
        sshd.wait()
    ending = (
        {"exit_code": code, "signal": None} if code >= 0 else {"exit_code": None, "signal": -code}
    )
    _write_atomic(args.status_file, {**ending, "at": _now()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
