"""The state directory: what the agent must still know after it died and came back.

Layout::

    runs/<assignment_id>/run.json     the run record (RunRecord)
    runs/<assignment_id>/output.log   the run's stdout and stderr, one stream
    runs/<assignment_id>/ready.json   written by the shim once the command was spawned
    runs/<assignment_id>/status.json  written by the shim when the command ended
    runs/<assignment_id>/env.json     the run's variables until the shim read them (process)
    runs/<assignment_id>/container.env  the same until the container started (podman, docker)
    runs/<assignment_id>/work/        the default working directory, the run's own user's
    outbox/<assignment_id>.<seq>.json reports not yet acknowledged by the control plane

Only the agent's user reads any of it: every file is 0600, the outbox 0700. The directories
down to a run's own are 0711, so a run (another user) can reach its working directory by
name but list, read or write nothing else: not the records, the outbox, other runs' output
or variables.

A record is never deleted: it is how the agent knows never to start an assignment twice.
Every write is atomic (a temporary file, fsync, rename, fsync of the directory), so a crash
leaves either the old or the new content, never half of one.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

# An assignment id becomes a directory name: only what a UUID (or a plain name) is made of.
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")

# The phases of a run record, in order.
STARTING = "starting"  # recorded before anything is spawned
LAUNCHED = "launched"  # the shim runs; `started` not reported yet
RUNNING = "running"  # `started` reported (queued in the outbox)
EXITING = "exiting"  # it ended; its output is being shipped before `exited` is reported
ENDED = "ended"  # `exited` or `start_failed` queued; nothing more to do
ACTIVE = (LAUNCHED, RUNNING, EXITING)


def safe_id(value: str) -> bool:
    return bool(_SAFE_ID.match(value))


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object written by ``write_atomic`` (here or by the shim), None when absent."""
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


@dataclass
class RunRecord:
    """One assignment this agent started (or tried to), across the agent's restarts."""

    assignment_id: str
    runtime: str
    phase: str = STARTING
    workload_name: str = ""
    gpus: list[int] = field(default_factory=list)
    stop_grace_s: float = 10.0
    ports: list[int] = field(default_factory=list)
    pid: int | None = None  # the shim: leader of the run's session and process group
    pid_start: int | None = None  # its start time (/proc/<pid>/stat field 22)
    container: str = ""  # the container's name (podman/docker)
    container_id: str = ""
    cgroups: list[str] = field(default_factory=list)  # the run's cgroup directories
    cgroup_note: str = ""
    uid: int | None = None  # the run's own user, held until the run has ended
    host_ports: list[int] = field(default_factory=list)  # a container's published ports
    ssh_port: int | None = None  # issue 32: the run's sshd's port, from --port-range
    sshd_pid: int | None = None  # its pid (its children are the SSH connections)
    idle_stop_s: float | None = None  # a dev environment's idle stop, and its GPU threshold
    idle_gpu_pct: float = 0.0
    idle_since: float | None = None  # wall clock: unused (no session, no GPU use) since
    idle_stopped: bool = False  # the agent stopped it as idle: it ended as it should
    last_seq: int = 0  # the last report seq used for this assignment
    log_offset: int = 0  # the next output byte the control plane wants
    log_dropped_sent: int = 0  # the dropped-bytes total last acknowledged
    log_abandoned: bool = False  # the control plane refused this run's logs
    stop_requested_at: float | None = None  # wall clock (survives restarts)
    killed: bool = False  # the agent sent SIGKILL (an exit without status is then signal 9)
    exit: dict[str, Any] | None = None  # the exited report's fields once known
    work_dir: str = ""  # a process run's working directory on this host (its notice file)
    volumes: dict[str, str] = field(default_factory=dict)  # volume id: its host directory

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        if data.get("cgroup") and "cgroups" not in data:  # a record of an agent before 0.2
            data = {**data, "cgroups": [data["cgroup"]]}
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})


class State:
    """The state directory, shared by the agent's threads under ``lock``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.lock = threading.RLock()
        (root / "runs").mkdir(parents=True, exist_ok=True)
        (root / "outbox").mkdir(parents=True, exist_ok=True)
        for path, mode in ((root, 0o711), (root / "runs", 0o711), (root / "outbox", 0o700)):
            path.chmod(mode)
        self._records: dict[str, RunRecord] = {}
        for path in sorted((root / "runs").glob("*/run.json")):
            data = read_json(path)
            if data is not None:
                record = RunRecord.from_json(data)
                self._records[record.assignment_id] = record
        # A crash between queueing a report and saving the record's seq must not reuse it.
        for report in self.outbox():
            known = self._records.get(report["assignment_id"])
            if known is not None and report["seq"] > known.last_seq:
                known.last_seq = report["seq"]

    # -- paths -------------------------------------------------------------------------

    def run_dir(self, assignment_id: str) -> Path:
        return self.root / "runs" / assignment_id

    def output_path(self, assignment_id: str) -> Path:
        return self.run_dir(assignment_id) / "output.log"

    def ready_path(self, assignment_id: str) -> Path:
        return self.run_dir(assignment_id) / "ready.json"

    def status_path(self, assignment_id: str) -> Path:
        return self.run_dir(assignment_id) / "status.json"

    def cidfile_path(self, assignment_id: str) -> Path:
        return self.run_dir(assignment_id) / "container.id"

    def ssh_dir(self, assignment_id: str) -> Path:
        """The run's sshd's files (issue 32), the run uid's own."""
        return self.run_dir(assignment_id) / "ssh"

    def work_dir(self, assignment_id: str) -> Path:
        return self.run_dir(assignment_id) / "work"

    def env_path(self, assignment_id: str, runtime: str) -> Path:
        name = "env.json" if runtime == "process" else "container.env"
        return self.run_dir(assignment_id) / name

    # -- run records -------------------------------------------------------------------

    def get(self, assignment_id: str) -> RunRecord | None:
        with self.lock:
            return self._records.get(assignment_id)

    def records(self) -> list[RunRecord]:
        with self.lock:
            return list(self._records.values())

    def save(self, record: RunRecord) -> None:
        with self.lock:
            run_dir = self.run_dir(record.assignment_id)
            if not run_dir.is_dir():
                run_dir.mkdir()
                run_dir.chmod(0o711)  # past the umask: the run reaches its work/ below
            path = self.run_dir(record.assignment_id) / "run.json"
            write_atomic(path, json.dumps(asdict(record), sort_keys=True).encode())
            self._records[record.assignment_id] = record

    # -- the outbox --------------------------------------------------------------------

    def enqueue(self, record: RunRecord, kind: str, **fields: Any) -> dict[str, Any]:
        """Queue a report with the assignment's next seq; kept until acknowledged.

        The report is written before the record's seq moves on, and both under the lock, so a
        crash in between is repaired on load (above) and no seq ever carries two reports."""
        with self.lock:
            seq = record.last_seq + 1
            report = {"assignment_id": record.assignment_id, "seq": seq, "kind": kind, **fields}
            entry = {"queued_ns": time.time_ns(), "report": report}
            name = f"{record.assignment_id}.{seq:08d}.json"
            write_atomic(self.root / "outbox" / name, json.dumps(entry).encode())
            record.last_seq = seq
            self.save(record)
            return report

    def outbox(self) -> list[dict[str, Any]]:
        """The unacknowledged reports, oldest first."""
        entries = []
        for path in (self.root / "outbox").glob("*.json"):
            entry = read_json(path)
            if entry is not None:
                entries.append(entry)
        entries.sort(key=lambda e: (e["queued_ns"], e["report"]["seq"]))
        return [entry["report"] for entry in entries]

    def acknowledge(self, assignment_id: str, seq: int) -> None:
        with self.lock:
            (self.root / "outbox" / f"{assignment_id}.{seq:08d}.json").unlink(missing_ok=True)
