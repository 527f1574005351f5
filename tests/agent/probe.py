"""What a customer's run tries on a shared node; run by tests/agent/test_isolation.py as an
assignment's command. Standard library only; prints one JSON line of what it got.

``PROBE`` (JSON) says what to try: read files, scan every process's environment for a
value, signal or trace pids, fork until refused, open device files, describe itself.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

_PTRACE_ATTACH, _PTRACE_DETACH = 16, 17


def _attempt(action: Any) -> str:
    try:
        action()
    except PermissionError:
        return "denied"
    except OSError as error:
        return f"error {error.errno}"
    return "done"


def _read(path: str) -> None:
    target = Path(path)
    if target.is_dir():
        os.listdir(target)
    else:
        target.read_bytes()


def _scan_environ(value: str) -> list[int]:
    holders = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if value.encode() in (entry / "environ").read_bytes():
                    holders.append(int(entry.name))
            except OSError:
                continue
    return holders


def _trace(pid: int) -> str:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(_PTRACE_ATTACH, pid, None, None) == 0:
        libc.ptrace(_PTRACE_DETACH, pid, None, None)
        return "attached"
    return "denied" if ctypes.get_errno() in (1, 13) else f"error {ctypes.get_errno()}"


def _fork(limit: int) -> int:
    """How many children it could have at once (each sleeps), up to ``limit``."""
    children = []
    for _ in range(limit):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return len(children)


def _open(path: str) -> str:
    try:
        os.close(os.open(path, os.O_RDONLY))
    except PermissionError:
        return "denied"
    except OSError as error:
        return f"error {error.errno}"
    return "opened"


def _self() -> dict[str, Any]:
    status = Path("/proc/self/status").read_text()
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    mask = os.umask(0)
    os.umask(mask)
    return {
        "uid": os.getuid(),
        "gid": os.getgid(),
        "groups": os.getgroups(),
        "no_new_privs": fields.get("NoNewPrivs", "").strip(),
        "umask": mask,
        "netns": os.readlink("/proc/self/ns/net"),
    }


def main() -> None:
    checks = json.loads(os.environ["PROBE"])
    found: dict[str, Any] = {}
    if checks.get("self"):
        found.update(_self())
    if "read" in checks:
        found["read"] = {name: _attempt(lambda p=p: _read(p)) for name, p in checks["read"].items()}
    if "scan_environ" in checks:
        found["scan_environ"] = _scan_environ(checks["scan_environ"])
    if "signal" in checks:
        found["signal"] = {
            str(pid): _attempt(lambda pid=pid: os.kill(pid, signal.SIGTERM))
            for pid in checks["signal"]
        }
    if "trace" in checks:
        found["trace"] = {str(pid): _trace(pid) for pid in checks["trace"]}
    if "fork" in checks:
        found["fork"] = _fork(int(checks["fork"]))
    if "open" in checks:
        found["open"] = {name: _open(path) for name, path in checks["open"].items()}
    print(json.dumps(found), flush=True)


if __name__ == "__main__":
    main()
