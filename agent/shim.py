"""The shim: the leader of a run's session and process group, and the witness of its end.

The agent starts ``python -I .../agent/shim.py --status-file S --ready-file R -- argv...``
in a new session, with stdout and stderr on the run's output file. The shim spawns the
command, waits for it and writes how it ended to the status file. The run is not the agent's
child, so it survives the agent; a restarted agent (no longer anyone's parent here) reads the
ending from the status file.

Run as a script by path (not ``-m agent.shim``) so it needs nothing on ``sys.path`` in the
run's working directory: it imports only the standard library.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
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


def _join_cgroup(path: str) -> dict[str, Any]:
    if not path:
        return {"applied": False, "note": ""}
    try:
        Path(path, "cgroup.procs").write_text(str(os.getpid()))
    except OSError as error:
        return {"applied": False, "note": f"could not join {path}: {error}"}
    return {"applied": True, "note": f"cgroup v2 {path}"}


def _outlive_stop(signum: int, frame: object) -> None:
    """SIGTERM to the group is for the command: the shim stays to write down its end."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agent.shim")
    parser.add_argument("--status-file", required=True, type=Path)
    parser.add_argument("--ready-file", required=True, type=Path)
    parser.add_argument("--cgroup", default="")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    # A Python handler, not SIG_IGN: handlers are reset by exec, so the command gets the
    # default action back while an ignored signal would stay ignored in it.
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _outlive_stop)
    cgroup = _join_cgroup(args.cgroup)
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL)  # noqa: S603 - the run
    except (OSError, ValueError) as error:
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
            "cgroup": cgroup,
            "at": _now(),
        },
    )
    code = child.wait()
    ending = (
        {"exit_code": code, "signal": None} if code >= 0 else {"exit_code": None, "signal": -code}
    )
    _write_atomic(args.status_file, {**ending, "at": _now()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
