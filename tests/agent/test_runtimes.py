"""The command lines of each runtime, exactly: GPUs, names without values, limits."""

from __future__ import annotations

import sys
from pathlib import Path

from agent import runtimes
from agent.runtimes import Launch

CID = Path("/state/runs/a1/container.id")


def launch(**fields: object) -> Launch:
    values: dict[str, object] = {
        "assignment_id": "a1",
        "argv": ["python", "train.py"],
        "image": "registry.example/train:1",
        "env": {"HF_TOKEN": "hf_secret", "MASTER_ADDR": "10.0.0.5"}
        | runtimes.gpu_env([2, 3], ["GPU-aaa", "GPU-bbb"]),
        "work_dir": "/workspace",
        "devices": ["GPU-aaa", "GPU-bbb"],
        "cpu_milli": 4500,
        "memory_mib": 16384,
        "ports": [8000],
    }
    return Launch(**(values | fields))  # type: ignore[arg-type]


def test_the_gpu_variables_name_devices_and_indices() -> None:
    assert runtimes.gpu_env([2, 3], ["2", "3"]) == {
        "CUDA_VISIBLE_DEVICES": "2,3",
        "NVIDIA_VISIBLE_DEVICES": "2,3",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "NEOCLOUD_GPU_INDICES": "2,3",
    }


def test_podman_gets_cdi_devices_env_names_without_values_and_limits() -> None:
    argv = runtimes.podman_run_argv(launch(), cidfile=CID)

    assert argv == [
        "podman", "run", "--rm", "--name", "neocloud-a1", "--cidfile", str(CID),
        "--device", "nvidia.com/gpu=GPU-aaa", "--device", "nvidia.com/gpu=GPU-bbb",
        "-e", "CUDA_DEVICE_ORDER", "-e", "CUDA_VISIBLE_DEVICES", "-e", "HF_TOKEN",
        "-e", "MASTER_ADDR", "-e", "NEOCLOUD_GPU_INDICES", "-e", "NVIDIA_VISIBLE_DEVICES",
        "-w", "/workspace", "--cpus", "4.5", "--memory", "16384m", "-p", "8000:8000",
        "registry.example/train:1", "python", "train.py",
    ]  # fmt: skip
    assert not any("hf_secret" in arg or "10.0.0.5" in arg for arg in argv)


def test_docker_gets_the_nvidia_runtime_and_its_device_list() -> None:
    argv = runtimes.docker_run_argv(launch(work_dir="", ports=[]), cidfile=CID)

    assert argv == [
        "docker", "run", "--rm", "--name", "neocloud-a1", "--cidfile", str(CID),
        "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=GPU-aaa,GPU-bbb",
        "-e", "CUDA_DEVICE_ORDER", "-e", "CUDA_VISIBLE_DEVICES", "-e", "HF_TOKEN",
        "-e", "MASTER_ADDR", "-e", "NEOCLOUD_GPU_INDICES",
        "--cpus", "4.5", "--memory", "16384m",
        "registry.example/train:1", "python", "train.py",
    ]  # fmt: skip
    assert not any("hf_secret" in arg for arg in argv)


def test_a_container_without_gpus_or_limits_asks_for_none() -> None:
    bare = launch(env={}, devices=[], cpu_milli=0, memory_mib=0, ports=[], work_dir="", argv=[])

    assert runtimes.docker_run_argv(bare, cidfile=CID) == [
        "docker", "run", "--rm", "--name", "neocloud-a1", "--cidfile", str(CID),
        "registry.example/train:1",
    ]  # fmt: skip


def test_containers_stop_with_the_grace_then_are_killed_and_removed() -> None:
    assert runtimes.container_stop_argv("podman", "neocloud-a1", 10) == [
        "podman", "stop", "--time", "10", "neocloud-a1",
    ]  # fmt: skip
    assert runtimes.container_kill_argv("docker", "neocloud-a1") == [
        "docker",
        "kill",
        "neocloud-a1",
    ]
    assert runtimes.container_rm_argv("docker", "neocloud-a1") == [
        "docker", "rm", "-f", "neocloud-a1",
    ]  # fmt: skip


def test_the_shim_wraps_the_command_isolated_from_the_runs_python_settings() -> None:
    argv = runtimes.shim_argv(
        status_file=Path("/s/status.json"),
        ready_file=Path("/s/ready.json"),
        cgroup="/sys/fs/cgroup/x/run-a1",
        command=["sh", "-c", "exit 3"],
    )

    assert argv == [
        sys.executable, "-I", str(runtimes.SHIM),
        "--status-file", "/s/status.json", "--ready-file", "/s/ready.json",
        "--cgroup", "/sys/fs/cgroup/x/run-a1", "--", "sh", "-c", "exit 3",
    ]  # fmt: skip


def test_the_process_environment_is_the_runs_not_the_agents(monkeypatch: object) -> None:
    env = runtimes.Runtime().shim_env(launch(env={"FOO": "bar"}, work_dir="/w"))

    assert set(env) == {"PATH", "HOME", "FOO"}
    assert env["HOME"] == "/w"


def test_the_operators_container_options_go_before_the_verb_and_after_run() -> None:
    options = runtimes.ContainerOptions(
        global_args=("--storage-driver", "vfs"), run_args=("--network", "none")
    )
    argv = runtimes.podman_run_argv(
        launch(env={}, cpu_milli=0, memory_mib=0, ports=[], work_dir="", argv=[]),
        cidfile=CID,
        options=options,
    )

    assert argv == [
        "podman", "--storage-driver", "vfs", "run", "--rm", "--name", "neocloud-a1",
        "--cidfile", str(CID),
        "--device", "nvidia.com/gpu=GPU-aaa", "--device", "nvidia.com/gpu=GPU-bbb",
        "--network", "none", "registry.example/train:1",
    ]  # fmt: skip
    assert runtimes.container_stop_argv("podman", "n", 3, options.global_args) == [
        "podman", "--storage-driver", "vfs", "stop", "--time", "3", "n",
    ]  # fmt: skip


def test_fake_gpus_pass_no_devices_into_a_container_only_the_variables() -> None:
    fake = launch(devices=["2", "3"], fake_gpus=True)

    podman = runtimes.podman_run_argv(fake, cidfile=CID)
    docker = runtimes.docker_run_argv(fake, cidfile=CID)

    assert not any(arg.startswith("nvidia.com/gpu") for arg in podman)
    assert "--runtime=nvidia" not in docker
    assert podman[podman.index("CUDA_VISIBLE_DEVICES") - 1] == "-e"
