"""Provisioning against real ``celery worker`` processes: a worker SIGKILLed mid-step, a
worker dying right after a step's effect, a step that hangs past its time limit. In every
case the node still becomes ready, and every step's effect happened exactly once (one
``SimulatedEffect`` per key, one ``ProvisioningStepSucceeded`` per step)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from inventory import events as ev
from inventory import services
from inventory.drivers import PROVISION_STEPS
from inventory.lifecycle import NodeState
from inventory.models import Node, SimulatedEffect
from tests.builders import run
from tests.celery_worker import CeleryWorker, celery_worker, wait_until, worker_queue
from tests.inventory.conftest import Fleet, provisioning_events, state_of, steps_of

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

READY_WITHIN_S = 60
FAST = {"SIMULATED_STEP_DELAY_S": 0.05, "PROVISIONING_RETRY_BASE_S": 0.2}

StartWorker = Callable[..., AbstractContextManager[CeleryWorker]]


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[StartWorker]:
    """Workers on one queue of this test's own: ``with start_worker(settings) as worker``."""
    with worker_queue() as queue:

        def start(settings: dict[str, Any]) -> AbstractContextManager[CeleryWorker]:
            return celery_worker(queue=queue, log_dir=tmp_path, settings={**FAST, **settings})

        yield start


def wait_ready(node: Node, worker: CeleryWorker) -> None:
    def ready() -> bool:
        state = state_of(node)
        assert state != NodeState.FAILED, f"provisioning failed:\n{worker.log()}"
        return state == NodeState.READY

    wait_until(ready, timeout=READY_WITHIN_S, what=f"node ready; worker log:\n{worker.log()}")


def in_flight(node: Node, step: str) -> bool:
    """The step was started and has no outcome yet."""
    return bool(steps_of(node, ev.ProvisioningStepStarted, step=step)) and not (
        steps_of(node, ev.ProvisioningStepSucceeded, step=step)
        or steps_of(node, ev.ProvisioningStepFailed, step=step)
    )


def assert_every_step_took_effect_exactly_once(node: Node) -> dict[str, dict[str, Any]]:
    succeeded = provisioning_events(node, ev.ProvisioningStepSucceeded)
    assert [d["step"] for d in succeeded] == list(PROVISION_STEPS)
    effects = {e.step: e for e in SimulatedEffect.objects.filter(node_id=node.pk).order_by("id")}
    assert SimulatedEffect.objects.filter(node_id=node.pk).count() == len(PROVISION_STEPS)
    assert {s: e.idempotency_key for s, e in effects.items()} == {
        s: f"{node.pk}:1:provision:{s}" for s in PROVISION_STEPS
    }
    # What the log says each step did is what the step did.
    assert {d["step"]: d["details"] for d in succeeded} == {s: e.result for s, e in effects.items()}
    return {d["step"]: d for d in succeeded}


def test_a_worker_killed_mid_step_is_replaced_and_the_node_still_becomes_ready(
    fleet: Fleet, start_worker: StartWorker
) -> None:
    # verify_gpus takes long enough for the kill to land inside it.
    slow = {"SIMULATED_STEP_DELAY_S": {"default": 0.05, "verify_gpus": 1.5}}
    node = fleet.node()

    with start_worker(slow) as first:
        run(services.node_provision, node=node)
        wait_until(lambda: in_flight(node, "verify_gpus"), timeout=30, what="verify_gpus")
        first.kill()
    assert not first.alive
    assert in_flight(node, "verify_gpus")  # the kill landed mid-step
    assert not SimulatedEffect.objects.filter(node_id=node.pk, step="verify_gpus").exists()

    with start_worker(slow) as second:
        wait_ready(node, second)

    succeeded = assert_every_step_took_effect_exactly_once(node)
    assert steps_of(node, ev.ProvisioningStepStarted, step="verify_gpus") == [
        ("verify_gpus", 1),
        ("verify_gpus", 2),
    ]
    assert succeeded["verify_gpus"]["attempt"] == 2
    assert provisioning_events(node, ev.ProvisioningStepFailed) == []


def test_a_worker_dying_right_after_a_steps_effect_does_not_repeat_the_effect(
    fleet: Fleet, start_worker: StartWorker
) -> None:
    node = fleet.node()

    # The crash kills the pool process; the worker's main process gives the message back
    # (reject_on_worker_lost) and a fresh pool process takes it.
    with start_worker({"SIMULATED_FAULTS": {"attach_storage": {"crash": 1.0}}}) as worker:
        run(services.node_provision, node=node)
        wait_ready(node, worker)

    succeeded = assert_every_step_took_effect_exactly_once(node)
    assert steps_of(node, ev.ProvisioningStepStarted, step="attach_storage") == [
        ("attach_storage", 1),
        ("attach_storage", 2),
    ]
    assert succeeded["attach_storage"]["attempt"] == 2  # found the effect of attempt 1
    assert "WorkerLostError" in worker.log() or "SIGKILL" in worker.log()


def test_a_step_hanging_past_its_time_limit_fails_and_is_retried(
    fleet: Fleet, start_worker: StartWorker
) -> None:
    node = fleet.node()
    hang_once = {
        "SIMULATED_FAULTS": {"connect_network": {"hang": 1.0, "first_attempts": 1}},
        "PROVISIONING_STEP_TIMEOUT_S": 1,
    }

    with start_worker(hang_once) as worker:
        run(services.node_provision, node=node)
        wait_ready(node, worker)

    succeeded = assert_every_step_took_effect_exactly_once(node)
    failed = provisioning_events(node, ev.ProvisioningStepFailed)
    assert [(f["step"], f["attempt"], f["final"]) for f in failed] == [
        ("connect_network", 1, False)
    ]
    assert "time limit" in failed[0]["error"]
    assert succeeded["connect_network"]["attempt"] == 2
