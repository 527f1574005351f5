"""``neocloud-agent``: the node agent's entry point (docs/operations/node-agent.md)."""

from __future__ import annotations

import logging
import os
import signal
import stat
import sys
from collections.abc import Sequence
from pathlib import Path

from agent import cgroups, processes, users
from agent.client import Client
from agent.config import parse
from agent.gpus import GpuDiscoveryError, discover
from agent.loops import Agent
from agent.runtimes import ContainerOptions, runtime_for
from agent.state import State

log = logging.getLogger("agent")


def _exposed(token_file: Path, state_dir: Path) -> str:
    """Why the node's credentials or state would be open to runs ("" when they are not):
    the token readable by others, or a state directory runs cannot reach their work in."""
    try:
        mode = token_file.stat().st_mode
    except OSError:
        mode = 0  # not there yet: the client says so at each request until it is
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        return f"the node token file {token_file} is open to others: chmod 600 {token_file}"
    if users.isolating():
        for parent in state_dir.resolve().parents:
            if not parent.stat().st_mode & stat.S_IXOTH:
                return (
                    f"{parent} is not searchable by others, so runs (their own users) cannot "
                    f"reach their working directories under {state_dir}: chmod o+x {parent}"
                )
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    config = parse(argv)
    logging.basicConfig(
        level=config.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    os.umask(0o077)  # every file the agent makes is its own user's alone
    try:
        gpus = discover(
            fake_gpus=config.fake_gpus,
            gpu_model=config.gpu_model,
            node_id=config.node_id,
            fake_device_files=config.fake_gpu_device_files,
        )
    except GpuDiscoveryError as error:
        log.error("%s", error)
        return 2
    problem = _exposed(config.token_file, config.state_dir)
    if problem:
        log.error("%s", problem)
        return 2
    if not users.isolating():
        log.warning(
            "not root: runs run as the agent's own user, not isolated from it or each other"
        )
    if gpus.fake:
        log.warning("FAKE GPUs: %d x %s (--fake-gpus)", config.fake_gpus, config.gpu_model)
    state = State(config.state_dir)
    runtime = runtime_for(
        config.runtime,
        ContainerOptions(config.container_global_args, config.container_run_args),
    )
    if runtime.applies_limits:
        limits = cgroups.Cgroups((), f"limits applied by {runtime.name} (--cpus/--memory)")
    else:
        limits = cgroups.probe()
        if not limits.available:
            log.warning("runs get no cpu/memory limits: %s", limits.note)
    if not processes.become_subreaper():
        log.warning("not a child subreaper: a stopped run's orphans are init's to reap")
    agent = Agent(
        config,
        client=Client(url=config.url, node_id=config.node_id, token_file=config.token_file),
        gpus=gpus,
        state=state,
        runtime=runtime,
        cgroups=limits,
    )
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: agent.stopping.set())
    log.info(
        "agent %s for node %s: %s, runtime %s, state in %s",
        config.advertise_address,
        config.node_id,
        config.url,
        runtime.name,
        config.state_dir,
    )
    return agent.run()


if __name__ == "__main__":
    sys.exit(main())
