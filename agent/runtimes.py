"""How a run is started and stopped: as processes, or as podman or docker containers.

Every runtime starts its run under the shim (agent/shim.py) in a session of its own, so the
run outlives the agent and its end is written down. The command lines are pure functions of
the launch, tested without podman or docker. Env values never appear on a command line: a
container gets ``-e NAME`` and the client reads the value from its own environment, so
secrets stay out of ``ps``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from agent import processes
from agent.state import RunRecord

SHIM = Path(__file__).resolve().with_name("shim.py")
# A container's own `stop --time` kills at the grace; the agent allows the client this long
# beyond it before it kills the container itself.
CONTAINER_STOP_SLACK_S = 5.0


@dataclass(frozen=True)
class Launch:
    """What one run needs, whatever runs it."""

    assignment_id: str
    argv: list[str]
    image: str
    env: dict[str, str]  # the assignment's env and the GPU variables
    work_dir: str  # the process's directory; a container's -w ("" for the image's own)
    devices: list[str]  # per GPU: its NVML UUID, or its index when the GPUs are fake
    cpu_milli: int
    memory_mib: int
    ports: list[int]
    fake_gpus: bool = False  # no devices to pass into a container: only the variables


@dataclass(frozen=True)
class ContainerOptions:
    """The operator's own options for the container client (``--container-global-args``,
    ``--container-run-args``), e.g. a storage driver, an OCI runtime, a network."""

    global_args: tuple[str, ...] = ()  # before the verb: every podman/docker call
    run_args: tuple[str, ...] = ()  # after ``run``


def gpu_env(indices: list[int], devices: list[str]) -> dict[str, str]:
    """The variables that show a run its GPUs (PROTOCOL §2)."""
    return {
        "CUDA_VISIBLE_DEVICES": ",".join(devices),
        "NVIDIA_VISIBLE_DEVICES": ",".join(devices),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "NEOCLOUD_GPU_INDICES": ",".join(str(index) for index in indices),
    }


def shim_argv(*, status_file: Path, ready_file: Path, cgroup: str, command: list[str]) -> list[str]:
    cgroup_flag = ["--cgroup", cgroup] if cgroup else []
    return [
        sys.executable,
        "-I",  # the run's PYTHONPATH and friends are for the command, not for the shim
        str(SHIM),
        "--status-file",
        str(status_file),
        "--ready-file",
        str(ready_file),
        *cgroup_flag,
        "--",
        *command,
    ]


def container_name(assignment_id: str) -> str:
    return f"neocloud-{assignment_id}"


def _limits(launch: Launch) -> list[str]:
    limits = []
    if launch.cpu_milli > 0:
        limits += ["--cpus", f"{launch.cpu_milli / 1000:g}"]
    if launch.memory_mib > 0:
        limits += ["--memory", f"{launch.memory_mib}m"]
    return limits


def _common(launch: Launch, env_names: list[str]) -> list[str]:
    args = []
    for name in env_names:
        args += ["-e", name]
    if launch.work_dir:
        args += ["-w", launch.work_dir]
    args += _limits(launch)
    for port in launch.ports:
        args += ["-p", f"{port}:{port}"]
    return args


def podman_run_argv(
    launch: Launch, *, cidfile: Path, options: ContainerOptions = ContainerOptions()
) -> list[str]:
    """``podman run`` with each GPU as a CDI device (``nvidia.com/gpu=<uuid or index>``)."""
    devices = []
    for device in [] if launch.fake_gpus else launch.devices:
        devices += ["--device", f"nvidia.com/gpu={device}"]
    return [
        "podman",
        *options.global_args,
        "run",
        "--rm",
        "--name",
        container_name(launch.assignment_id),
        "--cidfile",
        str(cidfile),
        *devices,
        *_common(launch, sorted(launch.env)),
        *options.run_args,
        launch.image,
        *launch.argv,
    ]


def docker_run_argv(
    launch: Launch, *, cidfile: Path, options: ContainerOptions = ContainerOptions()
) -> list[str]:
    """``docker run`` on the NVIDIA runtime, its GPUs named in NVIDIA_VISIBLE_DEVICES (a
    device list, not a secret: the one value on the command line)."""
    gpus = []
    if launch.devices and not launch.fake_gpus:
        gpus = ["--runtime=nvidia", "-e", f"NVIDIA_VISIBLE_DEVICES={','.join(launch.devices)}"]
    names = sorted(name for name in launch.env if not (gpus and name == "NVIDIA_VISIBLE_DEVICES"))
    return [
        "docker",
        *options.global_args,
        "run",
        "--rm",
        "--name",
        container_name(launch.assignment_id),
        "--cidfile",
        str(cidfile),
        *gpus,
        *_common(launch, names),
        *options.run_args,
        launch.image,
        *launch.argv,
    ]


def container_stop_argv(
    runtime: str, name: str, grace_s: float, global_args: tuple[str, ...] = ()
) -> list[str]:
    return [runtime, *global_args, "stop", "--time", str(max(0, round(grace_s))), name]


def container_kill_argv(runtime: str, name: str, global_args: tuple[str, ...] = ()) -> list[str]:
    return [runtime, *global_args, "kill", name]


def container_rm_argv(runtime: str, name: str, global_args: tuple[str, ...] = ()) -> list[str]:
    return [runtime, *global_args, "rm", "-f", name]


def _resolve(command: str, *, path: str, cwd: str) -> bool:
    if "/" in command:
        target = Path(cwd, command)
        return target.is_file() and os.access(target, os.X_OK)
    return shutil.which(command, path=path) is not None


class Runtime:
    """The process runtime; the container runtimes below change what the shim runs and how
    a run is stopped."""

    name = "process"
    applies_limits = False  # whether the runtime itself applies cpu/memory limits

    def problem(self, launch: Launch) -> str:
        """Why the launch cannot start ("" when it can): reported as ``start_failed``."""
        if not launch.argv:
            return "no command to run"
        path = launch.env.get("PATH", os.environ.get("PATH", os.defpath))
        if not _resolve(launch.argv[0], path=path, cwd=launch.work_dir):
            return f"command not found: {launch.argv[0]}"
        return ""

    def command(self, launch: Launch, *, cidfile: Path) -> list[str]:
        return list(launch.argv)

    def shim_env(self, launch: Launch) -> dict[str, str]:
        """The run's environment: nothing of the agent's but PATH; HOME its directory."""
        base = {"PATH": os.environ.get("PATH", os.defpath), "HOME": launch.work_dir}
        return {**base, **launch.env}

    def spawn(self, argv: list[str], *, env: dict[str, str], cwd: str, output: Path) -> int:
        """Start the shim in a session of its own; its pid (= the group's id)."""
        with open(output, "ab") as out:
            shim = subprocess.Popen(  # noqa: S603 - the shim, by absolute path
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        return shim.pid

    def escalate_after(self, grace_s: float) -> float:
        return grace_s

    def terminate(self, record: RunRecord) -> None:
        if record.pid is not None:
            processes.signal_group(record.pid, signal.SIGTERM)

    def kill(self, record: RunRecord) -> None:
        if record.pid is not None:
            processes.signal_group(record.pid, signal.SIGKILL)


class ContainerRuntime(Runtime):
    """podman or docker: the shim runs the client's ``run`` in the foreground."""

    applies_limits = True

    def __init__(self, name: str, options: ContainerOptions = ContainerOptions()) -> None:
        self.name = name
        self.options = options

    def problem(self, launch: Launch) -> str:
        if shutil.which(self.name) is None:
            return f"{self.name} not found on the agent's PATH"
        if not launch.image:
            return f"no image to run with {self.name}"
        return ""

    def command(self, launch: Launch, *, cidfile: Path) -> list[str]:
        build = podman_run_argv if self.name == "podman" else docker_run_argv
        return build(launch, cidfile=cidfile, options=self.options)

    def shim_env(self, launch: Launch) -> dict[str, str]:
        """The client's own environment (it needs its PATH, HOME, XDG_RUNTIME_DIR) plus the
        run's values, which it passes on for the ``-e NAME`` on its command line."""
        return {**os.environ, **launch.env}

    def escalate_after(self, grace_s: float) -> float:
        return grace_s + CONTAINER_STOP_SLACK_S

    def terminate(self, record: RunRecord) -> None:
        subprocess.Popen(  # noqa: S603 - fixed argv; not waited for: it blocks up to the grace
            container_stop_argv(
                self.name, record.container, record.stop_grace_s, self.options.global_args
            ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def kill(self, record: RunRecord) -> None:
        for argv in (
            container_kill_argv(self.name, record.container, self.options.global_args),
            container_rm_argv(self.name, record.container, self.options.global_args),
        ):
            try:
                subprocess.run(argv, capture_output=True, timeout=30, check=False)  # noqa: S603
            except (OSError, subprocess.TimeoutExpired):
                continue
        super().kill(record)


def runtime_for(name: str, options: ContainerOptions = ContainerOptions()) -> Runtime:
    return Runtime() if name == "process" else ContainerRuntime(name, options)
