"""The agent at work: three loops over one state directory.

- the poll loop long-polls the assignments and reconciles (reconcile.decide, then stops
  before starts);
- the watcher notices launches and endings, escalates stops, ships output and sends the
  outbox; it reports ``exited`` only once the run's output is all shipped;
- the heartbeat loop reports the GPUs, the agent and the volumes' usage, which the usage
  loop measures (agent/usage.py).

Runs never depend on the agent: stopping the agent (or losing the control plane) leaves them
running, and the state directory lets a restarted agent take them up again.
"""

from __future__ import annotations

import datetime
import logging
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent import VERSION, cgroups, fencing, logs, notices, processes, ssh, usage, users
from agent.backoff import UNAUTHORIZED_RETRY_S, Backoff
from agent.cgroups import Cgroups
from agent.client import Client, Rejected, Unauthorized, Unreachable
from agent.config import Config
from agent.gpus import Gpus
from agent.launching import Launcher, StartFailed
from agent.reconcile import Assignment, Plan, decide
from agent.runtimes import Runtime, container_name
from agent.state import (
    ACTIVE,
    ENDED,
    EXITING,
    LAUNCHED,
    RUNNING,
    STARTING,
    RunRecord,
    State,
    read_json,
)

log = logging.getLogger(__name__)

WATCH_S = 0.2
LOG_REQUESTS_PER_TICK = 8  # per run: 8 MiB a tick at most, so one chatty run starves no other
REPORT_BATCH = 100


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Agent:
    def __init__(
        self,
        config: Config,
        *,
        client: Client,
        gpus: Gpus,
        state: State,
        runtime: Runtime,
        cgroups: Cgroups,
    ) -> None:
        self.config = config
        self.client = client
        self.gpus = gpus
        self.state = state
        self.runtime = runtime
        self.cgroups = cgroups
        self.launcher = Launcher(config, state=state, gpus=gpus, runtime=runtime, cgroups=cgroups)
        self.stopping = threading.Event()
        self.unauthorized = threading.Event()  # the token was refused: start nothing new
        self.accepting = True  # the last heartbeat's `accepting_work`
        self._offline = False
        self._mismatch = ""
        self._link = threading.Lock()
        self._refused_at = 0.0
        self._seen_alive: set[str] = set()  # runs the watcher saw alive in this process
        self.fence = fencing.Fence(config.fence_after_s)
        self.volume_usage = usage.VolumeUsage()

    # -- the link to the control plane ---------------------------------------------------

    def _failed(self, error: Exception) -> None:
        with self._link:
            if isinstance(error, Unauthorized):
                self._refused_at = time.monotonic()
                if not self.unauthorized.is_set():
                    log.error(
                        "control plane refused the node token (%s): starting nothing new, "
                        "runs keep running; re-reading %s every %.0f s",
                        error,
                        self.config.token_file,
                        UNAUTHORIZED_RETRY_S,
                    )
                self.unauthorized.set()
            elif isinstance(error, Unreachable) and not self._offline:
                log.warning(
                    "control plane unreachable (%s): runs go on, reports and logs wait on disk",
                    error,
                )
                self._offline = True

    def _succeeded(self, asked_at: float) -> None:
        """A request asked at ``asked_at`` succeeded. One asked before the token was last
        refused (a long poll in flight while the token was rotated) proves nothing."""
        with self._link:
            if asked_at < self._refused_at:
                return
            if self._offline or self.unauthorized.is_set():
                log.info("control plane reachable again, token accepted")
            self._offline = False
            self.unauthorized.clear()

    def _guarded(self, backoff: Backoff, step: Callable[[], None]) -> None:
        """Run a step that talks to the control plane, unless its backoff says not yet."""
        if not backoff.ready():
            return
        asked_at = time.monotonic()
        try:
            step()
        except (Unauthorized, Unreachable) as error:
            self._failed(error)
            backoff.failed(error)
        else:
            backoff.succeeded()
            self._succeeded(asked_at)

    # -- the loops -----------------------------------------------------------------------

    def run(self) -> int:
        """Recover, run the loops until SIGTERM (``stopping``), leave the runs running."""
        self.recover()
        loops = [self._poll_loop, self._watch_loop, self._heartbeat_loop, self._usage_loop]
        for loop in loops:
            threading.Thread(
                target=self._resilient, args=(loop,), name=loop.__name__, daemon=True
            ).start()
        self.stopping.wait()
        # Not in the middle of a start (the state lock), so no run is left half-recorded.
        if self.state.lock.acquire(timeout=30):
            active = sum(r.phase in ACTIVE for r in self.state.records())
            log.info("agent stopping; %d run(s) keep running", active)
        return 0

    def _resilient(self, loop: Callable[[], None]) -> None:
        """A bug met in one round must not silently end a loop (and with it the agent's
        work): it is logged with its traceback and the loop goes on."""
        while not self.stopping.is_set():
            try:
                loop()
            except Exception:
                log.exception("%s failed; going on in 1 s", loop.__name__)
                self.stopping.wait(1.0)

    def _heartbeat_loop(self) -> None:
        backoff = Backoff()
        while not self.stopping.is_set():
            self._guarded(backoff, self._heartbeat)
            if self.fence.due():
                self._fence()
            self.stopping.wait(self.config.heartbeat_s)

    def _usage_loop(self) -> None:
        while not self.stopping.is_set():
            mounted = [
                (volume_id, directory)
                for record in self.state.records()
                if record.phase in ACTIVE
                for volume_id, directory in record.volumes.items()
            ]
            self.volume_usage.measure_pass(mounted)
            self.stopping.wait(self.config.volume_usage_s)

    def _heartbeat(self) -> None:
        try:
            answer = self.client.heartbeat(self.heartbeat_body())
        except Rejected as error:
            log.error("heartbeat refused: %s", error)
            return
        self.accepting = bool(answer.get("accepting_work", True))
        self.fence.heard()
        mismatch = str(answer.get("mismatch") or "")
        if mismatch != self._mismatch:
            if mismatch:
                log.error("control plane: inventory mismatch: %s", mismatch)
            self._mismatch = mismatch

    def heartbeat_body(self) -> dict[str, Any]:
        return {
            "agent": {
                "version": VERSION,
                "runtime": self.runtime.name,
                "address": self.config.advertise_address,
                "fake_gpus": self.gpus.fake,
                "cgroups": self.cgroups.available or self.runtime.applies_limits,
                "cgroups_note": self.cgroups.note,
                "isolation": self.isolation(),
                "volumes_disk_gb": self.config.volumes_disk_gb,
            },
            "gpus": [gpu.as_report() for gpu in self.gpus.read()],
            "volumes": self.volume_usage.report(),
        }

    def isolation(self) -> str:
        """What keeps runs apart on this node, in a sentence for the operator."""
        if users.isolating():
            span = self.config.run_uids
            return f"a uid of its own per run ({span.start}-{span.stop - 1})"
        return "none: the agent is not root, so every run is the agent's own user"

    def _poll_loop(self) -> None:
        since: str | None = None
        backoff = Backoff()
        while not self.stopping.is_set():
            asked_at = time.monotonic()
            try:
                wait = self.config.poll_wait_s if since is not None else 0
                answer = self.client.assignments(wait_s=wait, since=since)
            except (Unauthorized, Unreachable) as error:
                self._failed(error)
                self.stopping.wait(backoff.failed(error))
                continue
            except Rejected as error:
                log.error("assignments refused: %s", error)
                self.stopping.wait(backoff.failed(error))
                continue
            backoff.succeeded()
            self._succeeded(asked_at)
            plan = self.reconcile(self._assignments(answer))
            since = str(answer.get("version", "")) or None
            if plan.deferred:
                since = None  # ask again soon: the GPUs are freed by the watcher, not a change
                self.stopping.wait(WATCH_S)

    @staticmethod
    def _assignments(answer: dict[str, Any]) -> list[Assignment]:
        assignments = []
        for data in answer.get("assignments") or []:
            try:
                assignments.append(Assignment.parse(data))
            except ValueError as error:
                log.error("assignment ignored: %s", error)
        return assignments

    def _watch_loop(self) -> None:
        backoff = Backoff()
        while not self.stopping.wait(WATCH_S):
            processes.reap_children()
            for record in self.state.records():
                if record.phase in (LAUNCHED, RUNNING):
                    self._watch(record)
            self._guarded(backoff, self._exchange)

    # -- reconciling ---------------------------------------------------------------------

    def reconcile(self, assignments: list[Assignment]) -> Plan:
        with self.state.lock:
            records = {r.assignment_id: r for r in self.state.records()}
            accepting = self.accepting and not self.unauthorized.is_set()
            plan = decide(assignments, records, accepting=accepting)
            for assignment_id in plan.stops:
                self._stop(records[assignment_id])
            for assignment in plan.notices:
                self._notice(records[assignment.id], assignment)
            for assignment in plan.forgotten:
                self._forget(assignment)
            for assignment in plan.starts:
                if self.stopping.is_set() or self.unauthorized.is_set():
                    break
                self._start(assignment)
            self._ssh_keys(assignments, records)
        return plan

    def _ssh_keys(self, assignments: list[Assignment], records: dict[str, RunRecord]) -> None:
        """Each running run's ``authorized_keys`` as listed now (issue 32): a key added or
        removed, or a member gone, takes effect at the next login."""
        for assignment in assignments:
            record = records.get(assignment.id)
            if assignment.ssh_keys is None or record is None or not record.ssh_port:
                continue
            if record.phase in (LAUNCHED, RUNNING):
                ssh.keys_write(self.state.ssh_dir(assignment.id), assignment.ssh_keys)

    def _fence(self) -> None:
        """Self-fencing (``agent.fencing``): stop every run; start nothing until heard."""
        with self.state.lock:
            self.accepting = False
            for record in fencing.to_stop(self.state.records()):
                self._stop(record)

    def _stop(self, record: RunRecord) -> None:
        record.stop_requested_at = time.time()
        self.state.save(record)
        if not self._alive(record):
            return  # ended already (the watcher reports it); its pid may name another now
        log.info(
            "stopping %s (SIGTERM, kill after %.0f s)", record.assignment_id, record.stop_grace_s
        )
        self.runtime.terminate(record)

    def _notice(self, record: RunRecord, assignment: Assignment) -> None:
        """Preemption with notice (issue 32): the notice file, then a stop whose grace is what
        is left of the notice."""
        notice = assignment.notice
        if notice is None:
            return
        record.stop_grace_s = notice.grace_s
        if record.work_dir and self._alive(record):
            notices.write(record.work_dir, record.uid, notice)
        log.info(
            "notice to %s: %s, stopped by %s", record.assignment_id, notice.reason, notice.deadline
        )
        self._stop(record)

    def _forget(self, assignment: Assignment) -> None:
        record = RunRecord(
            assignment_id=assignment.id,
            runtime=self.runtime.name,
            phase=ENDED,
            last_seq=assignment.last_seq,
        )
        message = "lost: the agent's state directory has no record of this run"
        log.error("%s: %s", assignment.id, message)
        self._report_ending(record, exit_code=None, signal=None, oom=False, message=message)

    def _start(self, assignment: Assignment) -> None:
        """Record the start before anything is spawned: a restart that finds only this
        record reports ``start_failed`` rather than starting it again."""
        grace = assignment.stop_grace_s
        container = self.runtime.name != "process"
        record = RunRecord(
            assignment_id=assignment.id,
            runtime=self.runtime.name,
            workload_name=assignment.workload_name,
            gpus=assignment.gpus,
            stop_grace_s=self.config.stop_grace_s if grace is None else grace,
            ports=assignment.ports,
            idle_stop_s=assignment.idle_stop_s,
            idle_gpu_pct=assignment.idle_gpu_pct,
            last_seq=assignment.last_seq,
            container=container_name(assignment.id) if container else "",
        )
        self.state.save(record)
        try:
            started = self.launcher.start(record, assignment)
        except StartFailed as error:
            self._start_failed(record, str(error))
            return
        record.pid = started.pid
        record.pid_start = processes.start_time(started.pid) or -1
        record.phase = LAUNCHED
        self.state.save(record)
        # The command line may be logged; the environment (secrets) never is.
        log.info(
            "launched %s (%s) pid %d uid %s gpus %s: %s",
            assignment.id,
            assignment.workload_name,
            started.pid,
            record.uid,
            assignment.gpus,
            started.command,
        )

    # -- watching ------------------------------------------------------------------------

    def recover(self) -> None:
        """Take up what a previous agent left: a start it died in, runs it launched."""
        with self.state.lock:
            for record in self.state.records():
                if record.phase == STARTING:
                    self._recover_start(record)
                elif record.phase in ACTIVE and record.pid is not None:
                    alive = processes.is_running(record.pid, record.pid_start or -1)
                    log.info(
                        "found %s (%s): pid %d %s",
                        record.assignment_id,
                        record.phase,
                        record.pid,
                        "running" if alive else "gone",
                    )

    def _recover_start(self, record: RunRecord) -> None:
        status = read_json(self.state.status_path(record.assignment_id))
        ready = read_json(self.state.ready_path(record.assignment_id))
        if status is not None and "error" in status:
            self._start_failed(record, str(status["error"]))
        elif ready is not None:
            # It got as far as spawning the shim: adopt the run, never start it again.
            record.pid, record.pid_start = int(ready["pid"]), int(ready["start_time"])
            record.phase = LAUNCHED
            self.state.save(record)
            log.info("adopted %s: pid %d", record.assignment_id, record.pid)
        else:
            self._start_failed(record, "agent died while starting")

    def _alive(self, record: RunRecord) -> bool:
        return record.pid is not None and processes.is_running(record.pid, record.pid_start or -1)

    def _watch(self, record: RunRecord) -> None:
        with self.state.lock:
            alive = self._alive(record)
            if alive:
                self._seen_alive.add(record.assignment_id)
            if alive and record.stop_requested_at is not None and not record.killed:
                deadline = record.stop_requested_at + self.runtime.escalate_after(
                    record.stop_grace_s
                )
                if time.time() >= deadline:
                    log.info("%s outlived its grace: SIGKILL", record.assignment_id)
                    record.killed = True
                    self.state.save(record)
                    self.runtime.kill(record)
                    if record.uid is not None:
                        users.kill_all(record.uid)
            if alive and record.phase == RUNNING and record.idle_stop_s is not None:
                self._idle_check(record)
            if record.phase == LAUNCHED:
                self._watch_launch(record, alive)
            if record.phase == RUNNING and not alive:
                self._ended(record)

    def _idle_check(self, record: RunRecord) -> None:
        """A dev environment unused for its idle stop is stopped, and ends as it should."""
        if record.stop_requested_at is not None:
            return
        since = record.idle_since
        utilisation = {gpu.index: gpu.utilization_pct for gpu in self.gpus.read()}
        if ssh.idle_step(record, utilisation, time.time()):
            log.info(
                "%s: no SSH session nor GPU use for %s s: stopping",
                record.assignment_id,
                record.idle_stop_s,
            )
            record.idle_stopped = True
            self._stop(record)
        elif record.idle_since != since:
            self.state.save(record)

    def _watch_launch(self, record: RunRecord, alive: bool) -> None:
        ident = record.assignment_id
        status = read_json(self.state.status_path(ident))
        if status is not None and "error" in status:
            self._start_failed(record, str(status["error"]))
            return
        if record.container:
            cidfile = self.state.cidfile_path(ident)
            record.container_id = cidfile.read_text().strip() if cidfile.exists() else ""
            if record.container_id:
                # The client has read the variables by now: they leave the disk.
                self.state.env_path(ident, record.runtime).unlink(missing_ok=True)
                self._report_started(record, {"applied": True, "note": record.cgroup_note})
            elif status is not None or not alive:
                tail = logs.tail(self.state.output_path(ident), self.config.log_max_bytes)
                self._start_failed(record, f"{record.runtime} run failed: {tail.strip()}")
            return
        ready = read_json(self.state.ready_path(ident))
        if ready is not None:
            record.sshd_pid = ready.get("sshd_pid")
            joined = ready.get("cgroup") or {} if record.cgroups else {}
            # The shim's note when it could not join them, else what they hold the run to.
            note = record.cgroup_note if joined.get("applied") else joined.get("note")
            applied = bool(joined.get("applied"))
            self._report_started(record, {"applied": applied, "note": note or record.cgroup_note})
        elif not alive:
            self._start_failed(record, "the shim ended before it started the command")

    def _report_started(self, record: RunRecord, cgroups_report: dict[str, Any]) -> None:
        record.phase = RUNNING
        self.state.enqueue(
            record,
            "started",
            at=_now(),
            pid=record.pid,
            container_id=record.container_id,
            message="",
            cgroups=cgroups_report,
        )
        log.info("started %s: pid %s", record.assignment_id, record.pid)
        ssh_endpoint = []
        if record.ssh_port:  # issue 32: the run's sshd
            at = f"{self.config.advertise_address}:{record.ssh_port}"
            ssh_endpoint = [{"port": record.ssh_port, "address": at, "kind": "ssh"}]
        if record.ports or ssh_endpoint:
            address = self.config.advertise_address
            published = record.host_ports or record.ports  # a process listens on its own
            ports = [
                {"port": port, "address": f"{address}:{host_port}"}
                for port, host_port in zip(record.ports, published, strict=True)
            ]
            self.state.enqueue(record, "ports", at=_now(), ports=[*ports, *ssh_endpoint])

    def _ended(self, record: RunRecord) -> None:
        """The shim is gone: how the run ended, from its status file (or the lack of one).
        Whatever of its group is left (a background child) goes with it."""
        if record.pid is not None and record.assignment_id in self._seen_alive:
            # Seen alive a tick ago: the group's id still names this run's leftovers (a pid
            # is not reused while its group has members). Never after a reboot's renumbering.
            processes.signal_group(record.pid, signal.SIGKILL)
        if record.uid is not None:
            users.kill_all(record.uid)  # what left the group: the uid is the run's alone
        oom = cgroups.oom_killed([Path(path) for path in record.cgroups])
        status = read_json(self.state.status_path(record.assignment_id)) or {}
        code, signum = status.get("exit_code"), status.get("signal")
        message = ""
        if "exit_code" in status:
            if signum == 9 and not record.cgroups and not record.killed:
                message = "SIGKILL without a cgroup: an OOM kill cannot be told from another"
        elif record.killed:
            code, signum = None, 9
        else:
            code, signum = None, None
            message = "lost: the run's shim ended without recording how the run ended"
        if record.idle_stopped and not oom:  # stopped as idle, as asked (issue 32)
            code, signum = 0, None
            message = f"idle stop: no SSH session nor GPU use for {record.idle_stop_s} s"
        record.exit = {"exit_code": code, "signal": signum, "oom": oom, "message": message}
        record.exit["at"] = status.get("at") or _now()
        record.phase = EXITING
        self.state.save(record)
        log.info(
            "%s ended: exit code %s signal %s%s",
            record.assignment_id,
            code,
            signum,
            " (out of memory)" if oom else "",
        )

    def _start_failed(self, record: RunRecord, message: str) -> None:
        log.error("%s could not start: %s", record.assignment_id, message)
        record.phase = ENDED
        self.state.enqueue(record, "start_failed", at=_now(), message=message)
        self._cleanup(record)

    def _report_ending(self, record: RunRecord, **fields: Any) -> None:
        record.phase = ENDED
        self.state.enqueue(record, "exited", **({"at": _now()} | fields))
        self._cleanup(record)

    def _cleanup(self, record: RunRecord) -> None:
        """The output is at the control plane (or given up): free the disk, the run's user
        and what it held."""
        self.state.output_path(record.assignment_id).unlink(missing_ok=True)
        self.launcher.clear(record)

    # -- talking: logs, then reports -----------------------------------------------------

    def _exchange(self) -> None:
        self._flush_outbox()
        cap = self.config.log_max_bytes
        for record in self.state.records():
            if record.phase not in ACTIVE:
                continue
            complete = False
            for _ in range(LOG_REQUESTS_PER_TICK):
                complete = logs.ship(self.client, self.state, record, cap)
                if complete:
                    break
            if record.phase == EXITING and complete:
                with self.state.lock:
                    self._report_ending(record, **(record.exit or {}))
        self._flush_outbox()

    def _flush_outbox(self) -> None:
        """Send the queued reports, each assignment's in its own requests, in seq order: a
        request refused for one assignment (``unknown_assignment``) holds no other back."""
        by_assignment: dict[str, list[dict[str, Any]]] = {}
        for report in self.state.outbox():
            by_assignment.setdefault(report["assignment_id"], []).append(report)
        for assignment_id, reports in by_assignment.items():
            for first in range(0, len(reports), REPORT_BATCH):
                batch = reports[first : first + REPORT_BATCH]
                try:
                    answer = self.client.reports(batch)
                except Rejected as error:
                    log.error("reports of %s refused (%s): dropped", assignment_id, error)
                    acknowledged = [[r["assignment_id"], r["seq"]] for r in batch]
                else:
                    acknowledged = [*answer.get("applied", []), *answer.get("duplicates", [])]
                for ident, seq in acknowledged:
                    self.state.acknowledge(str(ident), int(seq))
