"""Setting a run up and clearing it away: its user, limits, ports, variables and cgroups.

Every limit is settled here, where the run starts, whatever the assignment asked for: a uid
of its own (never root), CPU and memory (its GPUs' share of the node when it named none),
processes, output, published ports from the node's range, and only its own GPUs' device
files. What was set up is undone when the run has ended, before its uid can go to another.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from agent import cgroups, devices, processes, shares, ssh, users, volumes
from agent.cgroups import Cgroups, Limits
from agent.config import Config
from agent.gpus import Gpus
from agent.reconcile import Assignment
from agent.runtimes import Launch, Runtime, gpu_env, shim_argv
from agent.state import ENDED, RunRecord, State, write_atomic

log = logging.getLogger(__name__)


def resume_env(assignment: Assignment) -> dict[str, str]:
    """A run of a workload that ran before (preempted and requeued, retried) is told so, and
    how many runs came before it (issue 32)."""
    return {
        "NEOCLOUD_RESUMED": "1" if assignment.restarts > 0 else "0",
        "NEOCLOUD_RESTARTS": str(assignment.restarts),
    }


class StartFailed(Exception):
    """Why a run cannot start; reported as ``start_failed`` with this message."""


@dataclass(frozen=True)
class Started:
    pid: int
    command: list[str]


class Launcher:
    def __init__(
        self, config: Config, *, state: State, gpus: Gpus, runtime: Runtime, cgroups: Cgroups
    ) -> None:
        self.config = config
        self.state = state
        self.gpus = gpus
        self.runtime = runtime
        self.cgroups = cgroups
        self.container = runtime.name != "process"
        self.node = shares.this_node(len(gpus.read()))

    def start(self, record: RunRecord, assignment: Assignment) -> Started:
        """Set the run up and spawn its shim; the record says what to undo (raises
        StartFailed, after which ``clear`` undoes what was done)."""
        record.uid = self._uid(record) if users.isolating() else None
        work_dir = self._work_dir(assignment, record.uid)
        record.work_dir = "" if self.container else work_dir
        cpu_milli, memory_mib = shares.limits(
            self.node,
            gpus=len(assignment.gpus),
            cpu_milli=assignment.cpu_milli,
            memory_mib=assignment.memory_mib,
        )
        record.host_ports = self._ports(assignment)
        mounted = self._volumes(assignment)
        record.volumes = {m.id: m.host_dir for m in mounted}  # measured while it runs
        self.state.save(record)
        devices_ = self.gpus.device_ids(assignment.gpus)
        launch = Launch(
            assignment_id=assignment.id,
            argv=assignment.argv,
            image=assignment.image,
            env={**assignment.env, **gpu_env(assignment.gpus, devices_), **resume_env(assignment)},
            work_dir=work_dir,
            devices=devices_,
            cpu_milli=cpu_milli,
            memory_mib=memory_mib,
            ports=assignment.ports,
            fake_gpus=self.gpus.fake,
            uid=record.uid,
            pids_max=self.config.pids_max,
            host_ports=record.host_ports,
            publish_address=self.config.publish_address,
            volumes=mounted,
        )
        self._check(assignment, launch)
        env_file = self.state.env_path(assignment.id, self.runtime.name)
        try:
            text = self.runtime.env_file_text(launch)
        except ValueError as error:
            raise StartFailed(str(error)) from None
        write_atomic(env_file, text.encode())  # 0600: root's alone
        record.cgroup_note = self._cgroups(record, assignment, launch)
        self.state.save(record)
        command = self.runtime.command(
            launch, cidfile=self.state.cidfile_path(assignment.id), env_file=env_file
        )
        argv = shim_argv(
            status_file=self.state.status_path(assignment.id),
            ready_file=self.state.ready_path(assignment.id),
            cgroups=record.cgroups,
            options=[
                *self.runtime.shim_options(launch, env_file),
                *self._ssh(record, assignment, launch),
            ],
            output_cap=self.config.log_max_bytes,
            command=command,
        )
        try:
            pid = self.runtime.spawn(
                argv,
                env=self.runtime.shim_env(),
                cwd=str(self.state.run_dir(assignment.id)) if self.container else work_dir,
                output=self.state.output_path(assignment.id),
            )
        except OSError as error:
            raise StartFailed(f"cannot start the run: {error}") from None
        return Started(pid=pid, command=command)

    def _ssh(self, record: RunRecord, assignment: Assignment, launch: Launch) -> list[str]:
        """The run's sshd (issue 32): a port of the node's range, its files, and what the shim
        needs to start it. A process run only: a container's would run inside it."""
        if assignment.ssh_keys is None:
            return []
        if self.container:
            raise StartFailed(f"ssh: not offered by the {self.runtime.name} runtime yet")
        problem = ssh.available()
        if problem:
            raise StartFailed(f"ssh: {problem}")
        held = [p for r in self.state.records() if r.phase != ENDED for p in r.host_ports]
        held += [r.ssh_port for r in self.state.records() if r.phase != ENDED and r.ssh_port]
        listen = self.config.publish_address
        port = ssh.free_port(self.config.port_range, [*held, *assignment.ports], listen)
        if port is None:
            raise StartFailed(f"ssh: no free port in this node's range {self.config.port_range}")
        record.ssh_port = port
        self.state.save(record)
        directory = self.state.ssh_dir(assignment.id)
        left_out = ssh.prepare(
            directory,
            uid=record.uid,
            port=port,
            listen=listen,
            home=launch.work_dir,
            env=launch.env,
            keys=assignment.ssh_keys,
        )
        if left_out:
            log.warning("%s: variables a login does not get: %s", assignment.id, left_out)
        return ssh.shim_options(directory)

    def _uid(self, record: RunRecord) -> int:
        held = {
            r.uid
            for r in self.state.records()
            if r.uid is not None and r.phase != ENDED and r.assignment_id != record.assignment_id
        }
        uid = users.free_uid(self.config.run_uids, held)
        if uid is None:
            raise StartFailed(f"no free run uid in {self.config.run_uids}: every one is in use")
        return uid

    def _work_dir(self, assignment: Assignment, uid: int | None) -> str:
        if self.container or assignment.working_dir:
            return assignment.working_dir
        path = self.state.work_dir(assignment.id)
        path.mkdir(exist_ok=True)
        if uid is not None:
            users.give(path, uid)
        return str(path)

    def _ports(self, assignment: Assignment) -> list[int]:
        """A container's host ports, from the node's range; a process listens on the host,
        so its own ports must lie in the range."""
        span = self.config.port_range
        if not self.container:
            outside = [port for port in assignment.ports if port not in span]
            if outside:
                raise StartFailed(f"ports {outside} are outside this node's range {span}")
            return []
        held = {port for r in self.state.records() if r.phase != ENDED for port in r.host_ports}
        free = (port for port in span if port not in held)
        chosen = [next(free, None) for _ in assignment.ports]
        if None in chosen:
            raise StartFailed(f"no free host port in this node's range {span}")
        return [port for port in chosen if port is not None]

    def _volumes(self, assignment: Assignment) -> tuple[volumes.Mounted, ...]:
        """Each volume's directory, made on its first use (agent/volumes.py)."""
        if assignment.volumes and not users.isolating():
            raise StartFailed("volumes are mounted by a root agent only")
        volumes_dir = self.config.volumes_dir or self.config.state_dir / "volumes"
        try:
            return tuple(
                volumes.prepare(mount, volumes_dir=volumes_dir, gids=self.config.volume_gids)
                for mount in assignment.volumes
            )
        except volumes.VolumeProblem as error:
            raise StartFailed(str(error)) from None

    def _check(self, assignment: Assignment, launch: Launch) -> None:
        known = {gpu.index for gpu in self.gpus.read()}
        missing = [index for index in assignment.gpus if index not in known]
        if missing:
            raise StartFailed(f"GPU index {missing} not on this node")
        if not self.container and not Path(launch.work_dir).is_dir():
            raise StartFailed(f"working directory not found: {launch.work_dir}")
        problem = self.runtime.problem(launch)
        if problem:
            raise StartFailed(problem)

    def _cgroups(self, record: RunRecord, assignment: Assignment, launch: Launch) -> str:
        """The run's cgroups (process runtime; a container runtime applies its own). Where
        the node has them, a run that cannot get its own does not start."""
        if self.container:
            return f"limits applied by {self.runtime.name} (--cpus/--memory/--pids-limit)"
        if not self.cgroups.available:
            return self.cgroups.note
        denied = [
            device
            for index, path in self.gpus.device_files().items()
            if index not in assignment.gpus
            for device in [devices.char_device(path)]
            if device is not None
        ]
        limits = Limits(launch.cpu_milli, launch.memory_mib, self.config.pids_max)
        try:
            paths = cgroups.create(self.cgroups, assignment.id, limits)
            record.cgroups = [str(path) for path in paths]
        except OSError as error:
            raise StartFailed(f"could not make the run's cgroups: {error}") from None
        note = self.cgroups.note
        try:
            cgroups.fence_devices(self.cgroups, paths, denied)
        except OSError as error:
            return f"{note}; other GPUs' device files NOT fenced: {error}"
        return f"{note}; other GPUs' device files fenced ({len(denied)})"

    def clear(self, record: RunRecord) -> None:
        """Undo the run's setup once it has ended: its processes (whatever group they
        escaped to), its files in the shared temporary directories and its working
        directory, its variables, its cgroups. Then its uid may go to another run."""
        ident = record.assignment_id
        for runtime in ("process", "container"):
            self.state.env_path(ident, runtime).unlink(missing_ok=True)
        if record.uid is not None:
            users.kill_all(record.uid)
            processes.reap_children()
            users.sweep(record.uid)
            work = self.state.work_dir(ident)
            if work.is_dir():
                shutil.rmtree(work, ignore_errors=True)
        if record.cgroups:
            cgroups.remove([Path(path) for path in record.cgroups])
        ssh.remove(self.state.ssh_dir(ident))
