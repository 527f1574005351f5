"""Flags, or their NEOCLOUD_* variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import parse

REQUIRED = ["--url", "http://cp:8000", "--node-id", "n1", "--token-file", "/t", "--state-dir", "/s"]


def test_every_flag_can_come_from_the_environment() -> None:
    config = parse(
        [],
        {
            "NEOCLOUD_URL": "https://cp.example",
            "NEOCLOUD_NODE_ID": "n1",
            "NEOCLOUD_TOKEN_FILE": "/etc/neocloud/token",
            "NEOCLOUD_STATE_DIR": "/var/lib/neocloud-agent",
            "NEOCLOUD_RUNTIME": "podman",
            "NEOCLOUD_FAKE_GPUS": "2",
            "NEOCLOUD_GPU_MODEL": "H100",
            "NEOCLOUD_ADVERTISE_ADDRESS": "10.0.0.5",
            "NEOCLOUD_HEARTBEAT_S": "2.5",
            "NEOCLOUD_POLL_WAIT_S": "30",
            "NEOCLOUD_LOG_MAX_BYTES": "1024",
            "NEOCLOUD_STOP_GRACE_S": "3",
            "NEOCLOUD_FENCE_AFTER_S": "60",
        },
    )

    assert (config.url, config.node_id, config.token_file, config.state_dir) == (
        "https://cp.example", "n1", Path("/etc/neocloud/token"), Path("/var/lib/neocloud-agent"),
    )  # fmt: skip
    assert (config.runtime, config.fake_gpus, config.gpu_model) == ("podman", 2, "H100")
    assert (config.advertise_address, config.heartbeat_s, config.poll_wait_s) == (
        "10.0.0.5", 2.5, 30,
    )  # fmt: skip
    assert (config.log_max_bytes, config.stop_grace_s, config.fence_after_s) == (1024, 3.0, 60.0)


def test_a_flag_wins_over_its_variable() -> None:
    config = parse([*REQUIRED, "--runtime", "docker"], {"NEOCLOUD_RUNTIME": "podman"})

    assert config.runtime == "docker"
    assert (config.fake_gpus, config.poll_wait_s, config.heartbeat_s) == (None, 20, 5.0)
    assert config.fence_after_s == 0  # off: runs go on through a partition
    assert config.volumes_dir == config.state_dir / "volumes"


@pytest.mark.parametrize(
    ("argv", "environ"),
    [
        ([], {}),
        ([*REQUIRED, "--runtime", "lxc"], {}),
        ([*REQUIRED, "--fake-gpus", "2"], {}),
        ([*REQUIRED, "--poll-wait-s", "61"], {}),
        (REQUIRED, {"NEOCLOUD_HEARTBEAT_S": "often"}),
        (["--url", "file:///x", *REQUIRED[2:]], {}),
        ([*REQUIRED, "--fence-after-s", "-1"], {}),
        ([*REQUIRED, "--volume-gids", "4050000-4150000"], {}),
        ([*REQUIRED, "--volume-usage-s", "0"], {}),
    ],
    ids=[
        "nothing",
        "runtime",
        "fake-without-model",
        "wait",
        "bad-variable",
        "scheme",
        "fence",
        "volume-gids-among-run-uids",
        "volume-usage",
    ],
)
def test_a_bad_configuration_exits_with_a_usage_error(
    argv: list[str], environ: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit:
        parse(argv, environ)

    assert exit.value.code == 2
    assert "neocloud-agent: error:" in capsys.readouterr().err
