"""The podman runtime for real: an image made here (``podman import`` of a root filesystem of
the host's own ``/bin/sh`` and its libraries), run by a real agent as the container of an
assignment, its GPU variables and its env passed by name, its exit code and output reported.

Skipped, saying why, where podman is missing or cannot run a container here. This machine's
podman (Debian 12's 4.3) runs one with the options below: the vfs storage driver and cgroupfs
(no overlay, no systemd), runc (crun refuses cgroups in hybrid mode), no network, and rlimits
within the sandbox's hard limits."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.agent.conftest import AgentProcess
from tests.agent.fake_control_plane import FakeControlPlane

IMAGE = "localhost/neocloud-agent-test:1"
RUN_ARGS = "--network none --ulimit nofile=1024:1024 --ulimit nproc=1024:1024"


def _libraries(binary: str) -> list[str]:
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    return [word for word in out.split() if word.startswith("/")]


def _root_filesystem(tar_path: Path) -> None:
    """/bin/sh and what it links, nothing else: a few MB."""
    shell = str(Path("/bin/sh").resolve())
    with tarfile.open(tar_path, "w") as tar:
        tar.add(shell, arcname="bin/sh")
        for library in _libraries(shell):
            tar.add(str(Path(library).resolve()), arcname=library.lstrip("/"))


@pytest.fixture
def podman_image(tmp_path: Path) -> Iterator[str]:
    """Global podman options with a store of the test's own, the image imported into it."""
    if shutil.which("podman") is None or shutil.which("runc") is None:
        pytest.skip("podman or runc is not installed (scripts/with-services.sh installs both)")
    # podman wants a short runroot (at most 50 characters): pytest's tmp_path is longer.
    runroot = Path(tempfile.mkdtemp(prefix="nc-podman-"))
    options = (
        f"--root {tmp_path / 'storage'} --runroot {runroot} --storage-driver vfs"
        " --cgroup-manager cgroupfs --runtime runc --events-backend none"
    )
    tar_path = tmp_path / "rootfs.tar"
    _root_filesystem(tar_path)
    podman = ["podman", *shlex.split(options)]
    imported = subprocess.run(
        [*podman, "import", str(tar_path), IMAGE], capture_output=True, text=True, timeout=120
    )
    if imported.returncode != 0:
        pytest.skip(f"podman cannot import an image here: {imported.stderr.strip()}")
    probe = subprocess.run(
        [*podman, "run", "--rm", *shlex.split(RUN_ARGS), IMAGE, "/bin/sh", "-c", "true"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if probe.returncode != 0:
        pytest.skip(f"podman cannot run a container here: {probe.stderr.strip()}")
    yield options
    shutil.rmtree(runroot, ignore_errors=True)


def test_a_container_run_gets_its_gpu_variables_and_env_by_name_and_reports_its_exit(
    plane: FakeControlPlane,
    start_agent: Callable[..., AgentProcess],
    podman_image: str,
) -> None:
    plane.assign(
        "c1",
        image=IMAGE,
        argv=[
            "/bin/sh",
            "-c",
            'echo "in-container cuda=$CUDA_VISIBLE_DEVICES secret=${#API_KEY}"; exit 7',
        ],
        gpus=[{"index": 1, "uuid": "GPU-x"}],
        env={"API_KEY": "container-s3cret"},
    )
    agent = start_agent(
        "--runtime",
        "podman",
        "--container-global-args",
        podman_image,
        "--container-run-args",
        RUN_ARGS,
    )
    plane.wait_for(lambda: plane.ended("c1"), timeout=120)

    started, exited = plane.reports("c1")
    assert started["kind"] == "started"
    assert started["container_id"]
    assert (exited["kind"], exited["exit_code"]) == ("exited", 7)
    assert plane.output("c1") == b"in-container cuda=1 secret=16\n"
    assert "container-s3cret" not in agent.log()


def test_a_runs_ld_preload_reaches_its_container_and_no_host_process(
    plane: FakeControlPlane,
    start_agent: Callable[..., AgentProcess],
    podman_image: str,
    preload: tuple[Path, Path],
) -> None:
    library, hits = preload
    plane.assign(
        "c1",
        image=IMAGE,
        argv=["/bin/sh", "-c", 'echo "preload=$LD_PRELOAD"'],
        env={"LD_PRELOAD": str(library), "CONTAINERS_CONF": "/nonexistent.conf"},
    )
    start_agent(
        "--runtime", "podman", "--container-global-args", podman_image,
        "--container-run-args", RUN_ARGS,
    )  # fmt: skip
    plane.wait_for(lambda: plane.ended("c1"), timeout=120)

    assert plane.reports("c1", "exited")[0]["exit_code"] == 0  # CONTAINERS_CONF ignored too
    assert f"preload={library}" in plane.output("c1").decode()
    assert list(hits.iterdir()) == []  # neither the shim nor podman (root) loaded it
