"""The command lines of each runtime, exactly: GPUs, an env file and no values, an
unprivileged user, limits, ports from the node's range."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from agent import runtimes
from agent.runtimes import Launch

CID = Path("/state/runs/a1/container.id")
ENV = Path("/state/runs/a1/container.env")


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
        "uid": 4000007,
        "pids_max": 4096,
        "host_ports": [30005],
        "publish_address": "10.0.0.9",
    }
    return Launch(**(values | fields))  # type: ignore[arg-type]


def test_the_gpu_variables_name_devices_and_indices() -> None:
    assert runtimes.gpu_env([2, 3], ["2", "3"]) == {
        "CUDA_VISIBLE_DEVICES": "2,3",
        "NVIDIA_VISIBLE_DEVICES": "2,3",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "NEOCLOUD_GPU_INDICES": "2,3",
    }


def test_podman_gets_cdi_devices_an_env_file_an_unprivileged_user_and_limits() -> None:
    argv = runtimes.podman_run_argv(launch(), cidfile=CID, env_file=ENV)

    assert argv == [
        "podman", "run", "--rm", "--name", "neocloud-a1", "--cidfile", str(CID),
        "--device", "nvidia.com/gpu=GPU-aaa", "--device", "nvidia.com/gpu=GPU-bbb",
        "--env-file", str(ENV), "--user", "4000007:4000007",
        "--cap-drop", "all", "--security-opt", "no-new-privileges",
        "-w", "/workspace", "--cpus", "4.5", "--memory", "16384m", "--pids-limit", "4096",
        "-p", "10.0.0.9:30005:8000",
        "registry.example/train:1", "python", "train.py",
    ]  # fmt: skip
    assert not any("hf_secret" in arg or "HF_TOKEN" in arg for arg in argv)


def test_docker_gets_the_nvidia_runtime_and_its_device_list() -> None:
    argv = runtimes.docker_run_argv(
        launch(work_dir="", ports=[], host_ports=[]), cidfile=CID, env_file=ENV
    )

    assert argv == [
        "docker", "run", "--rm", "--name", "neocloud-a1", "--cidfile", str(CID),
        "--env-file", str(ENV), "--user", "4000007:4000007",
        "--cap-drop", "all", "--security-opt", "no-new-privileges",
        "--cpus", "4.5", "--memory", "16384m", "--pids-limit", "4096",
        "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=GPU-aaa,GPU-bbb",
        "registry.example/train:1", "python", "train.py",
    ]  # fmt: skip
    assert not any("hf_secret" in arg for arg in argv)


def test_a_container_without_gpus_or_limits_is_still_unprivileged() -> None:
    bare = launch(
        env={}, devices=[], cpu_milli=0, memory_mib=0, ports=[], work_dir="", argv=[],
        uid=None, pids_max=0, host_ports=[],
    )  # fmt: skip

    assert runtimes.docker_run_argv(bare, cidfile=CID, env_file=ENV) == [
        "docker", "run", "--rm", "--name", "neocloud-a1", "--cidfile", str(CID),
        "--env-file", str(ENV), "--cap-drop", "all", "--security-opt", "no-new-privileges",
        "registry.example/train:1",
    ]  # fmt: skip


def test_a_published_port_on_an_ipv6_address_is_bracketed() -> None:
    argv = runtimes.podman_run_argv(launch(publish_address="fd00::5"), cidfile=CID, env_file=ENV)

    assert "[fd00::5]:30005:8000" in argv


def test_the_container_env_file_holds_the_values_a_line_each() -> None:
    assert runtimes.env_file_lines({"B": "2 two", "A": "x=y"}) == "A=x=y\nB=2 two\n"


@pytest.mark.parametrize("value", ["line\nbreak", "carriage\rreturn", "nul\0"])
def test_a_value_a_container_env_file_cannot_hold_is_refused_naming_only_the_variable(
    value: str,
) -> None:
    with pytest.raises(ValueError, match="env SECRET_KEY") as refused:
        runtimes.env_file_lines({"SECRET_KEY": value})
    assert value not in str(refused.value)


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
        cgroups=["/sys/fs/cgroup/cpu/run-a1", "/sys/fs/cgroup/memory/run-a1"],
        options=["--uid", "4000007"],
        output_cap=1000,
        command=["sh", "-c", "exit 3"],
    )

    assert argv == [
        sys.executable, "-I", str(runtimes.SHIM),
        "--status-file", "/s/status.json", "--ready-file", "/s/ready.json",
        "--output-cap", "1000",
        "--cgroup", "/sys/fs/cgroup/cpu/run-a1", "--cgroup", "/sys/fs/cgroup/memory/run-a1",
        "--uid", "4000007", "--", "sh", "-c", "exit 3",
    ]  # fmt: skip


def test_no_variable_of_a_run_reaches_the_shim_or_the_container_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NEOCLOUD_URL", "https://cloud.example")
    evil = launch(env={"LD_PRELOAD": "/w/evil.so", "PYTHONPATH": "/w", "DOCKER_HOST": "tcp://x"})

    assert runtimes.Runtime().shim_env() == {"PATH": os.environ["PATH"]}
    client = runtimes.ContainerRuntime("podman").shim_env()
    assert not {"LD_PRELOAD", "PYTHONPATH", "DOCKER_HOST", "NEOCLOUD_URL"} & set(client)
    assert set(evil.env) <= set(json.loads(runtimes.Runtime().env_file_text(evil)))


def test_the_process_environment_is_the_runs_not_the_agents() -> None:
    env = json.loads(runtimes.Runtime().env_file_text(launch(env={"FOO": "bar"}, work_dir="/w")))

    assert env == {"PATH": os.environ["PATH"], "HOME": "/w", "TMPDIR": "/w", "FOO": "bar"}
    assert runtimes.Runtime().shim_options(launch(), ENV) == [
        "--env-file", str(ENV), "--uid", "4000007", "--nproc", "4096",
    ]  # fmt: skip


def test_the_operators_container_options_go_before_the_verb_and_after_run() -> None:
    options = runtimes.ContainerOptions(
        global_args=("--storage-driver", "vfs"), run_args=("--network", "none")
    )
    argv = runtimes.podman_run_argv(
        launch(env={}, ports=[], host_ports=[], work_dir="", argv=[], uid=None),
        cidfile=CID,
        env_file=ENV,
        options=options,
    )

    assert argv[:4] == ["podman", "--storage-driver", "vfs", "run"]
    assert argv[-3:] == ["--network", "none", "registry.example/train:1"]
    assert runtimes.container_stop_argv("podman", "n", 3, options.global_args) == [
        "podman", "--storage-driver", "vfs", "stop", "--time", "3", "n",
    ]  # fmt: skip


def test_fake_gpus_pass_no_devices_into_a_container_only_the_variables() -> None:
    fake = launch(devices=["2", "3"], fake_gpus=True, env=runtimes.gpu_env([2, 3], ["2", "3"]))

    podman = runtimes.podman_run_argv(fake, cidfile=CID, env_file=ENV)
    docker = runtimes.docker_run_argv(fake, cidfile=CID, env_file=ENV)

    assert not any(arg.startswith("nvidia.com/gpu") for arg in podman)
    assert "--runtime=nvidia" not in docker
    assert "CUDA_VISIBLE_DEVICES=2,3\n" in runtimes.env_file_lines(fake.env)
