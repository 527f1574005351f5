"""The agent's configuration: each flag, or its ``NEOCLOUD_*`` variable (PROTOCOL §6)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import shlex
import socket
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agent import VERSION

RUNTIMES = ("process", "podman", "docker")


@dataclass(frozen=True)
class Config:
    url: str
    node_id: str
    token_file: Path
    state_dir: Path
    runtime: str
    fake_gpus: int | None
    gpu_model: str
    advertise_address: str
    heartbeat_s: float
    poll_wait_s: int
    log_max_bytes: int
    stop_grace_s: float
    log_level: str
    container_global_args: tuple[str, ...] = ()
    container_run_args: tuple[str, ...] = ()
    run_uids: range = range(4_000_000, 4_100_000)
    port_range: range = range(30000, 33000)
    pids_max: int = 4096
    fake_gpu_device_files: str = ""
    volumes_disk_gb: int = 0  # disk offered to local volumes (issue 32), reported
    volumes_dir: Path | None = None  # local volumes' directories (None: under state_dir)
    volume_gids: range = range(4_100_000, 4_200_000)  # a group per volume (agent/volumes.py)
    volume_usage_s: float = 60.0  # how often mounted volumes' usage is measured (agent/usage.py)

    @property
    def publish_address(self) -> str:
        """Where published ports listen: the advertised address when it is an IP address
        (a host name cannot be bound to: every address then)."""
        try:
            return str(ipaddress.ip_address(self.advertise_address))
        except ValueError:
            return ""

    fence_after_s: float = 0.0


# flag, variable, type, default, help
_OPTIONS: list[tuple[str, str, type, object, str]] = [
    ("--url", "NEOCLOUD_URL", str, None, "the control plane, e.g. https://cloud.example.com"),
    ("--node-id", "NEOCLOUD_NODE_ID", str, None, "this node's id in the control plane"),
    ("--token-file", "NEOCLOUD_TOKEN_FILE", Path, None, "file holding the node token"),
    ("--state-dir", "NEOCLOUD_STATE_DIR", Path, None, "where runs and reports are kept"),
    ("--runtime", "NEOCLOUD_RUNTIME", str, "process", "process, podman or docker"),
    ("--fake-gpus", "NEOCLOUD_FAKE_GPUS", int, None, "pretend to have N GPUs (no NVML)"),
    ("--gpu-model", "NEOCLOUD_GPU_MODEL", str, "", "the fake GPUs' model name"),
    (
        "--fake-gpu-device-files",
        "NEOCLOUD_FAKE_GPU_DEVICE_FILES",
        str,
        "",
        "character devices standing in for the fake GPUs', e.g. /srv/fake/gpu{index}",
    ),
    ("--advertise-address", "NEOCLOUD_ADVERTISE_ADDRESS", str, "", "address others reach"),
    ("--heartbeat-s", "NEOCLOUD_HEARTBEAT_S", float, 5.0, "seconds between heartbeats"),
    ("--poll-wait-s", "NEOCLOUD_POLL_WAIT_S", int, 20, "long-poll wait, 0-60 s"),
    ("--log-max-bytes", "NEOCLOUD_LOG_MAX_BYTES", int, 64 * 1024 * 1024, "per-run log cap"),
    ("--stop-grace-s", "NEOCLOUD_STOP_GRACE_S", float, 10.0, "grace when an assignment has none"),
    ("--log-level", "NEOCLOUD_LOG_LEVEL", str, "INFO", "the agent's own log level"),
    (
        "--run-uids",
        "NEOCLOUD_RUN_UIDS",
        str,
        "4000000-4099999",
        "the uids runs get, one each, FIRST-LAST (used when the agent is root)",
    ),
    (
        "--port-range",
        "NEOCLOUD_PORT_RANGE",
        str,
        "30000-32999",
        "host ports runs may publish, FIRST-LAST, on the advertised address",
    ),
    ("--pids-max", "NEOCLOUD_PIDS_MAX", int, 4096, "processes and threads a run may have"),
    (
        "--volumes-disk-gb",
        "NEOCLOUD_VOLUMES_DISK_GB",
        int,
        0,
        "GB of this node's disk offered to local volumes (0: none)",
    ),
    (
        "--volumes-dir",
        "NEOCLOUD_VOLUMES_DIR",
        Path,
        None,
        "where local volumes' directories are made (default: STATE_DIR/volumes)",
    ),
    (
        "--volume-gids",
        "NEOCLOUD_VOLUME_GIDS",
        str,
        "4100000-4199999",
        "the groups volumes get, one each, FIRST-LAST (first half local, second shared);"
        " apart from --run-uids",
    ),
    (
        "--volume-usage-s",
        "NEOCLOUD_VOLUME_USAGE_S",
        float,
        60.0,
        "seconds between two measures of the usage of the volumes runs mount (reported in the"
        " heartbeat)",
    ),
    (
        "--fence-after-s",
        "NEOCLOUD_FENCE_AFTER_S",
        float,
        0.0,
        "stop every run after this long without a heartbeat answered (0: never); below the"
        " control plane's HEARTBEAT_TIMEOUT_S, so that no run goes on once requeued",
    ),
    (
        "--container-global-args",
        "NEOCLOUD_CONTAINER_GLOBAL_ARGS",
        str,
        "",
        "options before podman/docker's verb, e.g. '--storage-driver vfs' (shell words)",
    ),
    (
        "--container-run-args",
        "NEOCLOUD_CONTAINER_RUN_ARGS",
        str,
        "",
        "options of every podman/docker run, e.g. '--network none' (shell words)",
    ),
]
_REQUIRED = ("url", "node_id", "token_file", "state_dir")


def _parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="neocloud-agent",
        description="The NeoCloud node agent: runs this node's assignments.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {VERSION}")
    for flag, variable, kind, default, text in _OPTIONS:
        # A string default goes through `type` like a flag would: a bad variable is an
        # argparse error naming the flag.
        value = environ.get(variable) or default
        parser.add_argument(flag, type=kind, default=value, help=f"{text} (${variable})")
    return parser


def _address_towards(url: str) -> str:
    """The local address the control plane's host is reached from (a UDP "connect" only
    picks a route; nothing is sent), else the host name."""
    host = urllib.parse.urlsplit(url).hostname or "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host, 9))
            return str(probe.getsockname()[0])
    except OSError:
        return socket.gethostname()


def _span(text: str, flag: str, lowest: int, parser: argparse.ArgumentParser) -> range:
    """``FIRST-LAST`` (both included) as a range, every value at least ``lowest``."""
    first, dash, last = text.partition("-")
    try:
        span = range(int(first), int(last) + 1)
    except ValueError:
        span = range(0)
    if not dash or not span or span.start < lowest:
        parser.error(f"{flag} must be FIRST-LAST with {lowest} <= FIRST <= LAST, not {text!r}")
    return span


def parse(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """The configuration, or exit 2 with argparse's message naming what is wrong."""
    environ = os.environ if environ is None else environ
    parser = _parser(environ)
    args = parser.parse_args(argv)
    missing = [name for name in _REQUIRED if getattr(args, name) is None]
    if missing:
        parser.error(
            "missing "
            + ", ".join(f"--{name.replace('_', '-')}" for name in missing)
            + " (or their NEOCLOUD_* variables)"
        )
    if urllib.parse.urlsplit(args.url).scheme not in ("http", "https"):
        parser.error(f"--url must be http:// or https://, not {args.url!r}")
    if args.runtime not in RUNTIMES:
        parser.error(f"--runtime must be one of {', '.join(RUNTIMES)}, not {args.runtime!r}")
    if args.fake_gpus is not None and (args.fake_gpus < 0 or not args.gpu_model):
        parser.error("--fake-gpus needs a count >= 0 and --gpu-model")
    if not 0 <= args.poll_wait_s <= 60:
        parser.error("--poll-wait-s must be within 0-60")
    if args.heartbeat_s <= 0 or args.log_max_bytes < 0 or args.stop_grace_s < 0:
        parser.error("--heartbeat-s must be > 0, --log-max-bytes and --stop-grace-s >= 0")
    if args.pids_max < 16:
        parser.error("--pids-max must be at least 16")
    # A run's uid is nobody's: not root, not a system account, not the usual login range.
    run_uids = _span(args.run_uids, "--run-uids", 10000, parser)
    port_range = _span(args.port_range, "--port-range", 1024, parser)
    if port_range.stop > 65536:
        parser.error(f"--port-range must end at 65535 at most, not {args.port_range!r}")
    volume_gids = _span(args.volume_gids, "--volume-gids", 10000, parser)
    # A run's primary group is its uid: a volume's group must never be one.
    if len(volume_gids) < 2 or (
        volume_gids.start < run_uids.stop and run_uids.start < volume_gids.stop
    ):
        parser.error("--volume-gids must hold 2 gids at least, none of --run-uids")
    if args.volume_usage_s <= 0:
        parser.error("--volume-usage-s must be > 0")
    if args.fence_after_s < 0:
        parser.error("--fence-after-s must be >= 0 (0: never)")
    return Config(
        url=args.url,
        node_id=args.node_id,
        token_file=args.token_file,
        state_dir=args.state_dir,
        runtime=args.runtime,
        fake_gpus=args.fake_gpus,
        gpu_model=args.gpu_model,
        advertise_address=args.advertise_address or _address_towards(args.url),
        heartbeat_s=args.heartbeat_s,
        poll_wait_s=args.poll_wait_s,
        log_max_bytes=args.log_max_bytes,
        stop_grace_s=args.stop_grace_s,
        log_level=args.log_level.upper(),
        container_global_args=tuple(shlex.split(args.container_global_args)),
        container_run_args=tuple(shlex.split(args.container_run_args)),
        run_uids=run_uids,
        port_range=port_range,
        pids_max=args.pids_max,
        fake_gpu_device_files=args.fake_gpu_device_files,
        fence_after_s=args.fence_after_s,
        volumes_disk_gb=args.volumes_disk_gb,
        volumes_dir=args.volumes_dir or args.state_dir / "volumes",
        volume_gids=volume_gids,
        volume_usage_s=args.volume_usage_s,
    )
