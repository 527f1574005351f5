"""Desired against actual: what the agent should stop and start (PROTOCOL §2).

Level-triggered: the decision depends only on the listed assignments and the run records,
never on what changed since last time, so a lost answer, a restart or a repeated answer
converges instead of repeating anything. Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.notices import Notice
from agent.state import LAUNCHED, RUNNING, RunRecord, safe_id
from agent.volumes import VolumeMount

RUN = "run"
STOP = "stop"


@dataclass(frozen=True)
class Assignment:
    """One entry of the assignments answer, checked."""

    id: str
    desired: str
    workload_name: str = ""
    argv: list[str] = field(default_factory=list)
    image: str = ""
    working_dir: str = ""
    env: dict[str, str] = field(default_factory=dict)
    gpus: list[int] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)
    cpu_milli: int = 0
    memory_mib: int = 0
    stop_grace_s: float | None = None
    last_seq: int = 0
    # Preemption with notice, and resume (issue 32).
    notice: Notice | None = None
    restarts: int = 0
    volumes: list[VolumeMount] = field(default_factory=list)
    ssh_keys: list[str] | None = None  # issue 32: None, no SSH; else its authorized_keys
    idle_stop_s: float | None = None  # issue 32: a dev environment's idle stop
    idle_gpu_pct: float = 0.0  # a GPU below this utilisation is not in use

    @classmethod
    def parse(cls, data: Any) -> Assignment:
        """Raises ValueError (naming the field) on an entry the agent cannot act on."""
        if not isinstance(data, dict):
            raise ValueError("an assignment is not an object")
        ident = data.get("id")
        if not isinstance(ident, str) or not safe_id(ident):
            raise ValueError(f"id: not a usable assignment id: {ident!r}")
        desired = data.get("desired")
        if desired not in (RUN, STOP):
            raise ValueError(f"{ident}: desired: {desired!r}")
        argv = data.get("argv") or []
        env = data.get("env") or {}
        if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
            raise ValueError(f"{ident}: argv: not a list of strings")
        if not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
            raise ValueError(f"{ident}: env: not a mapping of strings")
        grace = data.get("stop_grace_s")
        try:
            return cls._build(data, ident, desired, argv, env, grace)
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{ident}: {error!r}") from None

    @classmethod
    def _build(
        cls,
        data: dict[str, Any],
        ident: str,
        desired: str,
        argv: list[str],
        env: dict[str, str],
        grace: Any,
    ) -> Assignment:
        idle = data.get("idle_stop")
        return cls(
            id=ident,
            desired=desired,
            workload_name=str(data.get("workload_name") or ""),
            argv=argv,
            image=str(data.get("image") or ""),
            working_dir=str(data.get("working_dir") or ""),
            env={str(k): v for k, v in env.items()},
            gpus=[int(gpu["index"]) for gpu in data.get("gpus") or []],
            ports=[int(port) for port in data.get("ports") or []],
            cpu_milli=int(data.get("cpu_milli") or 0),
            memory_mib=int(data.get("memory_mib") or 0),
            stop_grace_s=None if grace is None else float(grace),
            last_seq=int(data.get("last_seq") or 0),
            notice=Notice.parse(data.get("notice")),
            restarts=int(data.get("restarts") or 0),
            volumes=[VolumeMount.parse(v) for v in data.get("volumes") or []],
            ssh_keys=_ssh_keys(data.get("ssh")),
            idle_stop_s=float(idle["after_s"]) if idle else None,
            idle_gpu_pct=float(idle["gpu_below_pct"]) if idle else 0.0,
        )


def _ssh_keys(ssh: Any) -> list[str] | None:
    if ssh is None:
        return None
    keys = ssh["authorized_keys"]
    if not (isinstance(keys, list) and all(isinstance(k, str) and "\n" not in k for k in keys)):
        raise ValueError("ssh.authorized_keys: not a list of one-line strings")
    return list(keys)


@dataclass(frozen=True)
class Plan:
    stops: list[str]  # assignment ids whose runs get SIGTERM (the watcher escalates)
    starts: list[Assignment]
    deferred: list[str]  # starts whose GPUs a stopping run still holds: next round
    forgotten: list[Assignment]  # reported started, but this state dir never ran them
    # Runs told they are stopped soon (issue 32): notice file, SIGTERM, kill at its end.
    notices: list[Assignment] = field(default_factory=list)


def decide(
    assignments: list[Assignment], records: dict[str, RunRecord], *, accepting: bool
) -> Plan:
    """Stops first, then the starts whose GPUs are free.

    Never a second start: an assignment with a record (even ended) is not started again, nor
    one the control plane already had reports about (``last_seq > 0``) without a record here
    (the state directory was lost): that one is reported lost instead."""
    wanted = {a.id for a in assignments if a.desired == RUN}
    alive = [r for r in records.values() if r.phase in (LAUNCHED, RUNNING)]
    stops = [r.assignment_id for r in alive if r.assignment_id not in wanted]
    stops = [i for i in stops if records[i].stop_requested_at is None]
    noticed = {r.assignment_id for r in alive if r.stop_requested_at is None}
    notices = [a for a in assignments if a.notice is not None and a.id in noticed]
    stops = [i for i in stops if i not in {a.id for a in notices}]
    busy = {gpu for r in alive for gpu in r.gpus}
    starts: list[Assignment] = []
    deferred: list[str] = []
    forgotten: list[Assignment] = []
    for assignment in assignments:
        if assignment.id in records:
            continue
        if assignment.last_seq > 0:
            forgotten.append(assignment)
        elif assignment.desired != RUN or not accepting:
            continue
        elif busy.intersection(assignment.gpus):
            deferred.append(assignment.id)
        else:
            starts.append(assignment)
            busy.update(assignment.gpus)
    return Plan(stops=stops, starts=starts, deferred=deferred, forgotten=forgotten, notices=notices)
