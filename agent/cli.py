"""``neocloud-agent``: the node agent's entry point (README "The node agent")."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Sequence

from agent import cgroups, processes
from agent.client import Client
from agent.config import parse
from agent.gpus import GpuDiscoveryError, discover
from agent.loops import Agent
from agent.runtimes import ContainerOptions, runtime_for
from agent.state import State

log = logging.getLogger("agent")


def main(argv: Sequence[str] | None = None) -> int:
    config = parse(argv)
    logging.basicConfig(
        level=config.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        gpus = discover(
            fake_gpus=config.fake_gpus, gpu_model=config.gpu_model, node_id=config.node_id
        )
    except GpuDiscoveryError as error:
        log.error("%s", error)
        return 2
    if gpus.fake:
        log.warning("FAKE GPUs: %d x %s (--fake-gpus)", config.fake_gpus, config.gpu_model)
    state = State(config.state_dir)
    runtime = runtime_for(
        config.runtime,
        ContainerOptions(config.container_global_args, config.container_run_args),
    )
    if runtime.applies_limits:
        limits = cgroups.Cgroups(None, f"limits applied by {runtime.name} (--cpus/--memory)")
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
