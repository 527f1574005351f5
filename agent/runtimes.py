"""How a run is started and stopped: as processes, or as podman or docker containers.

Every runtime starts its run under the shim (agent/shim.py) in a session of its own, so the
run outlives the agent and its end is written down. The command lines are pure functions of
the launch, tested without podman or docker.

No variable of a run reaches a process on the host side (the shim, podman, docker): each
could change what that process does as root (``LD_PRELOAD``, ``CONTAINERS_CONF``,
``DOCKER_HOST``). They go in a file only root can read: JSON the shim hands to the command
(process runtime), or the client's ``--env-file`` (containers), removed once the run started.
Env values never appear on a command line, so secrets stay out of ``ps``.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent import processes
from agent.state import RunRecord
from agent.volumes import Mounted

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
    uid: int | None = None  # the run's own user (None: the agent's, when it is not root)
    pids_max: int = 0
    host_ports: list[int] = field(default_factory=list)  # a container's, one per port
    publish_address: str = ""  # where published ports listen ("" for every address)
    volumes: tuple[Mounted, ...] = ()


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


def shim_argv(
    *,
    status_file: Path,
    ready_file: Path,
    command: list[str],
    cgroups: Sequence[str] = (),
    options: Sequence[str] = (),
    output_cap: int = 0,
) -> list[str]:
    cgroup_flags = [flag for path in cgroups for flag in ("--cgroup", path)]
    return [
        sys.executable,
        "-I",  # no PYTHONPATH and friends of anyone's: the shim reads only the standard library
        str(SHIM),
        "--status-file",
        str(status_file),
        "--ready-file",
        str(ready_file),
        "--output-cap",
        str(output_cap),
        *cgroup_flags,
        *options,
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
    if launch.pids_max > 0:
        limits += ["--pids-limit", str(launch.pids_max)]
    return limits


def _publish(address: str, host_port: int, port: int) -> str:
    if not address:
        return f"{host_port}:{port}"
    host = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    return f"{host}:{host_port}:{port}"


def _common(launch: Launch, env_file: Path) -> list[str]:
    """Unprivileged whatever the image says: the run's own uid, no capabilities, no way to
    gain privileges; its variables from the env file; ports from the node's range."""
    args = ["--env-file", str(env_file)]
    if launch.uid is not None:
        args += ["--user", f"{launch.uid}:{launch.uid}"]
    args += ["--cap-drop", "all", "--security-opt", "no-new-privileges"]
    if launch.work_dir:
        args += ["-w", launch.work_dir]
    args += _limits(launch)
    for port, host_port in zip(launch.ports, launch.host_ports, strict=True):
        args += ["-p", _publish(launch.publish_address, host_port, port)]
    for volume in launch.volumes:
        # A plain bind (no :Z relabel): the directory is the volume's, shared by its runs.
        suffix = ":ro" if volume.read_only else ""
        args += ["-v", f"{volume.host_dir}:{volume.path}{suffix}", "--group-add", str(volume.gid)]
    return args


def env_file_lines(env: dict[str, str]) -> str:
    """The ``--env-file`` of podman and docker: NAME=VALUE a line, so no value may hold a
    line break (ValueError naming the variable, never its value)."""
    for name, value in env.items():
        if "\n" in value or "\r" in value or "\0" in value or "=" in name or "\n" in name:
            raise ValueError(f"env {name}: a line break cannot be passed to a container")
    return "".join(f"{name}={value}\n" for name, value in sorted(env.items()))


def podman_run_argv(
    launch: Launch,
    *,
    cidfile: Path,
    env_file: Path,
    options: ContainerOptions = ContainerOptions(),
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
        *_common(launch, env_file),
        *(["--umask", "0007"] if launch.volumes else []),  # the volume's group may write too
        *options.run_args,
        launch.image,
        *launch.argv,
    ]


def docker_run_argv(
    launch: Launch,
    *,
    cidfile: Path,
    env_file: Path,
    options: ContainerOptions = ContainerOptions(),
) -> list[str]:
    """``docker run`` on the NVIDIA runtime, its GPUs named in NVIDIA_VISIBLE_DEVICES (a
    device list, not a secret: the one value on the command line, after the env file so it
    wins over a run's own NVIDIA_VISIBLE_DEVICES)."""
    gpus = []
    if launch.devices and not launch.fake_gpus:
        gpus = ["--runtime=nvidia", "-e", f"NVIDIA_VISIBLE_DEVICES={','.join(launch.devices)}"]
    return [
        "docker",
        *options.global_args,
        "run",
        "--rm",
        "--name",
        container_name(launch.assignment_id),
        "--cidfile",
        str(cidfile),
        *_common(launch, env_file),
        *gpus,
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

    def command(self, launch: Launch, *, cidfile: Path, env_file: Path) -> list[str]:
        return list(launch.argv)

    def env_file_text(self, launch: Launch) -> str:
        """The run's environment, for the shim to hand to the command: nothing of the agent's
        but PATH; HOME and TMPDIR its directory."""
        base = {
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": launch.work_dir,
            "TMPDIR": launch.work_dir,
        }
        return json.dumps({**base, **launch.env})

    def shim_options(self, launch: Launch, env_file: Path) -> list[str]:
        options = ["--env-file", str(env_file)]
        if launch.uid is not None:
            options += ["--uid", str(launch.uid), "--nproc", str(launch.pids_max)]
        for volume in launch.volumes:
            mode = "ro" if volume.read_only else "rw"
            options += ["--mount", volume.host_dir, volume.path, mode, "--group", str(volume.gid)]
        return options

    def shim_env(self) -> dict[str, str]:
        """The shim's own environment: the agent's PATH, nothing of any run's."""
        return {"PATH": os.environ.get("PATH", os.defpath)}

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
        if any(":" in v.host_dir + v.path for v in launch.volumes):
            return f"{self.name} cannot mount a volume on a path with ':'"
        if shutil.which(self.name) is None:
            return f"{self.name} not found on the agent's PATH"
        if not launch.image:
            return f"no image to run with {self.name}"
        return ""

    def command(self, launch: Launch, *, cidfile: Path, env_file: Path) -> list[str]:
        build = podman_run_argv if self.name == "podman" else docker_run_argv
        return build(launch, cidfile=cidfile, env_file=env_file, options=self.options)

    def env_file_text(self, launch: Launch) -> str:
        return env_file_lines(launch.env)

    def shim_options(self, launch: Launch, env_file: Path) -> list[str]:
        return []  # the client runs as the agent's user; the container as the run's

    def shim_env(self) -> dict[str, str]:
        """The client's environment is the operator's (PATH, HOME, XDG_RUNTIME_DIR, its
        CONTAINER_* settings), without the agent's own NEOCLOUD_* settings."""
        return {k: v for k, v in os.environ.items() if not k.startswith("NEOCLOUD_")}

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
