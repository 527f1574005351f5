"""Provisioning runs in process (Celery eager): steps, retries with backoff, final failure,
exactly-once effects, teardown, reconciliation. The real worker (kills, time limits) is in
``test_worker_kill.py``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from pytest_django.fixtures import Settings

from events import store
from inventory import events as ev
from inventory import provisioning, services
from inventory.drivers import PROVISION_STEPS, TEARDOWN_STEPS, NodeSpec
from inventory.drivers import simulated as simulated_module
from inventory.drivers.simulated import Fault, SimulatedDriver, fault_draw
from inventory.lifecycle import NodeAction, NodeState
from inventory.models import Node, ProvisioningStep, SimulatedEffect
from inventory.tasks import provision_step, reconcile_provisioning
from tests.builders import run
from tests.inventory.conftest import Fleet, provisioning_events, state_of, steps_of

pytestmark = [
    pytest.mark.django_db(transaction=True),  # real commits: steps dispatch each other on commit
    pytest.mark.usefixtures("eager_tasks"),
]


@pytest.fixture(autouse=True)
def _fast(settings: Settings) -> None:
    settings.SIMULATED_STEP_DELAY_S = 0
    settings.SIMULATED_FAULTS = {}
    settings.SIMULATED_SEED = 0
    settings.PROVISIONING_MAX_ATTEMPTS = 5
    settings.PROVISIONING_RETRY_BASE_S = 1.0


@pytest.fixture
def countdowns(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The countdown of every retry the step task asked Celery for, in order."""
    seen: list[float] = []
    task_class = provision_step.__class__  # the task's own class, not its proxy's
    retry = task_class.retry

    def spy(self: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["countdown"])
        return retry(self, **kwargs)

    monkeypatch.setattr(task_class, "retry", spy)
    return seen


def provision(node: Node) -> Node:
    """Start a run; eager tasks run it all before this returns."""
    run(services.node_provision, node=node)
    return Node.objects.get(pk=node.pk)


def effects_by_step(node: Node) -> dict[str, list[str]]:
    by_step: dict[str, list[str]] = {}
    for step, key in SimulatedEffect.objects.filter(node_id=node.pk).values_list(
        "step", "idempotency_key"
    ):
        by_step.setdefault(step, []).append(key)
    return by_step


def key(node: Node, step: str, run_number: int = 1, phase: str = "provision") -> str:
    return f"{node.pk}:{run_number}:{phase}:{step}"


# --- the happy path ---------------------------------------------------------------------------


def test_a_node_reaches_ready_through_every_step_once(fleet: Fleet) -> None:
    node = provision(fleet.node())

    assert node.state == NodeState.READY
    assert steps_of(node, ev.ProvisioningStepStarted) == [(s, 1) for s in PROVISION_STEPS]
    assert steps_of(node, ev.ProvisioningStepSucceeded) == [(s, 1) for s in PROVISION_STEPS]
    assert provisioning_events(node, ev.ProvisioningStepFailed) == []
    assert effects_by_step(node) == {s: [key(node, s)] for s in PROVISION_STEPS}
    last = provisioning_events(node, ev.NodeStateChanged)[-1]
    assert (last["action"], last["from_state"], last["to_state"]) == (
        NodeAction.BECOME_READY,
        NodeState.PROVISIONING,
        NodeState.READY,
    )


@pytest.mark.smoke
@pytest.mark.django_db  # not transactional: SQLite's log cannot be flushed after a test
def test_in_process_a_run_completes_once_the_request_commits(
    fleet: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    node = fleet.node()

    with django_capture_on_commit_callbacks(execute=True):
        run(services.node_provision, node=node)

    assert state_of(node) == NodeState.READY
    assert steps_of(node, ev.ProvisioningStepSucceeded) == [(s, 1) for s in PROVISION_STEPS]


def test_each_step_records_the_drivers_result_and_who_did_it(fleet: Fleet) -> None:
    node = provision(fleet.node())

    details = {
        d["step"]: d["details"] for d in provisioning_events(node, ev.ProvisioningStepSucceeded)
    }
    stored = dict(SimulatedEffect.objects.filter(node_id=node.pk).values_list("step", "result"))
    assert details == stored
    assert set(details["allocate_server"]) >= {"server_id", "ip"}
    assert set(details["create_credentials"]) >= {"ssh_user", "credential_id"}
    assert details["verify_gpus"]["gpus_found"] == 8
    rows = ProvisioningStep.objects.filter(node=node).values_list("step", "status", "attempts")
    assert list(rows) == [(s, "succeeded", 1) for s in PROVISION_STEPS]
    step_events = [
        e for e in store.read_stream(ev.NODE_STREAM, str(node.pk)) if "ProvisioningStep" in e.type
    ]
    assert {e.metadata["actor"] for e in step_events} == {"system:provisioning"}


# --- retries and failures -----------------------------------------------------------------------


def test_failures_are_retried_with_exponential_backoff_then_succeed(
    fleet: Fleet, settings: Settings, countdowns: list[float]
) -> None:
    settings.SIMULATED_FAULTS = {"install_gpu_drivers": {"fail": 1.0, "first_attempts": 2}}
    settings.PROVISIONING_RETRY_BASE_S = 0.5

    node = provision(fleet.node())

    assert node.state == NodeState.READY
    failed = provisioning_events(node, ev.ProvisioningStepFailed)
    assert [(f["step"], f["attempt"], f["final"]) for f in failed] == [
        ("install_gpu_drivers", 1, False),
        ("install_gpu_drivers", 2, False),
    ]
    assert "simulated failure of install_gpu_drivers" in failed[0]["error"]
    assert countdowns == [0.5, 1.0]
    assert steps_of(node, ev.ProvisioningStepStarted, step="install_gpu_drivers") == [
        ("install_gpu_drivers", 1),
        ("install_gpu_drivers", 2),
        ("install_gpu_drivers", 3),
    ]
    assert steps_of(node, ev.ProvisioningStepSucceeded) == [
        (s, 3 if s == "install_gpu_drivers" else 1) for s in PROVISION_STEPS
    ]
    assert effects_by_step(node)["install_gpu_drivers"] == [key(node, "install_gpu_drivers")]


def test_seeded_random_faults_fail_exactly_the_attempts_their_draws_say(
    fleet: Fleet, settings: Settings
) -> None:
    node = fleet.node()
    step_key = key(node, "connect_network")

    def fails(seed: int, attempt: int) -> bool:
        return fault_draw(seed=seed, key=step_key, attempt=attempt, kind="fail") < 0.5

    # A seed whose draws fail the first attempt, and let one of the next three succeed.
    seed = next(s for s in range(1000) if fails(s, 1) and not all(fails(s, a) for a in (2, 3, 4)))
    first_success = next(a for a in range(2, 5) if not fails(seed, a))
    expected_failures = list(range(1, first_success))
    settings.SIMULATED_SEED = seed
    settings.SIMULATED_FAULTS = {"connect_network": {"fail": 0.5}}

    node = provision(node)

    assert node.state == NodeState.READY
    assert [
        f["attempt"] for f in provisioning_events(node, ev.ProvisioningStepFailed)
    ] == expected_failures
    assert steps_of(node, ev.ProvisioningStepSucceeded, step="connect_network") == [
        ("connect_network", len(expected_failures) + 1)
    ]


def test_exhausting_the_attempts_fails_the_run_and_the_node(
    fleet: Fleet, settings: Settings, countdowns: list[float]
) -> None:
    settings.SIMULATED_FAULTS = {"verify_gpus": {"fail": 1.0}}
    settings.PROVISIONING_MAX_ATTEMPTS = 3

    node = provision(fleet.node())

    assert node.state == NodeState.FAILED
    assert "verify_gpus" in node.state_reason
    failed = provisioning_events(node, ev.ProvisioningStepFailed)
    assert [(f["step"], f["attempt"], f["final"]) for f in failed] == [
        ("verify_gpus", 1, False),
        ("verify_gpus", 2, False),
        ("verify_gpus", 3, True),
    ]
    assert countdowns == [1.0, 2.0]
    assert [s for s, _ in steps_of(node, ev.ProvisioningStepStarted)] == [
        "allocate_server",
        "install_gpu_drivers",
        "verify_gpus",
        "verify_gpus",
        "verify_gpus",
    ]
    assert set(effects_by_step(node)) == {"allocate_server", "install_gpu_drivers"}
    assert ProvisioningStep.objects.get(node=node, step="verify_gpus").status == "failed"
    fail = provisioning_events(node, ev.NodeStateChanged)[-1]
    assert (fail["action"], fail["to_state"]) == (NodeAction.FAIL, NodeState.FAILED)


def test_a_terminal_failure_fails_the_node_without_a_retry(
    fleet: Fleet, settings: Settings, countdowns: list[float]
) -> None:
    settings.SIMULATED_FAULTS = {"attach_storage": {"fail": 1.0, "retryable": False}}

    node = provision(fleet.node())

    assert node.state == NodeState.FAILED
    failed = provisioning_events(node, ev.ProvisioningStepFailed)
    assert [(f["step"], f["attempt"], f["final"]) for f in failed] == [("attach_storage", 1, True)]
    assert countdowns == []


def test_a_failed_node_provisioned_again_gets_a_new_run_with_new_keys(
    fleet: Fleet, settings: Settings
) -> None:
    settings.SIMULATED_FAULTS = {"verify_gpus": {"fail": 1.0, "retryable": False}}
    node = provision(fleet.node())
    settings.SIMULATED_FAULTS = {}

    node = provision(node)

    assert node.state == NodeState.READY
    assert steps_of(node, ev.ProvisioningStepSucceeded, run=2) == [(s, 1) for s in PROVISION_STEPS]
    assert effects_by_step(node)["allocate_server"] == [
        key(node, "allocate_server", 1),
        key(node, "allocate_server", 2),
    ]


# --- exactly once ---------------------------------------------------------------------------


def test_a_step_that_succeeded_is_never_run_again(fleet: Fleet) -> None:
    node = provision(fleet.node())
    version = node.version

    # The duplicates at-least-once delivery makes: the whole run, and one step message.
    provisioning.provisioning_dispatch(node.pk)
    provision_step.delay(str(node.pk), 1)

    node.refresh_from_db()
    assert node.version == version  # not one event more
    assert steps_of(node, ev.ProvisioningStepSucceeded) == [(s, 1) for s in PROVISION_STEPS]
    assert effects_by_step(node) == {s: [key(node, s)] for s in PROVISION_STEPS}


def test_the_driver_returns_the_stored_result_for_a_known_key(fleet: Fleet) -> None:
    node = fleet.node()
    spec = NodeSpec(
        node_id=node.pk,
        name=node.name,
        cluster="eu-west-1",
        gpu_model="h100-sxm",
        gpu_count=8,
        cpu_milli=96_000,
        memory_mib=1_048_576,
    )
    driver = SimulatedDriver()

    first = driver.run_step("allocate_server", spec, idempotency_key="k-1")
    again = driver.run_step("allocate_server", spec, idempotency_key="k-1")
    other = driver.run_step("allocate_server", spec, idempotency_key="k-2")

    assert again == first
    assert other["server_id"] != first["server_id"]
    assert SimulatedEffect.objects.filter(idempotency_key="k-1").count() == 1
    assert SimulatedEffect.objects.count() == 2


class WorkerDied(Exception):
    """Stands in for the SIGKILL of the ``crash`` fault (which would end pytest)."""


def test_a_step_whose_worker_died_after_its_effect_is_recorded_without_a_second_effect(
    fleet: Fleet, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    def die() -> None:
        raise WorkerDied

    settings.SIMULATED_FAULTS = {"attach_storage": {"crash": 1.0}}
    monkeypatch.setattr(simulated_module, "_crash", die)
    node = fleet.node()
    with pytest.raises(WorkerDied):
        provision(node)
    effect = SimulatedEffect.objects.get(idempotency_key=key(node, "attach_storage"))
    assert steps_of(node, ev.ProvisioningStepSucceeded, step="attach_storage") == []

    provisioning.provisioning_dispatch(node.pk)  # the message comes back

    assert state_of(node) == NodeState.READY
    assert steps_of(node, ev.ProvisioningStepStarted, step="attach_storage") == [
        ("attach_storage", 1),
        ("attach_storage", 2),
    ]
    (succeeded,) = [
        d
        for d in provisioning_events(node, ev.ProvisioningStepSucceeded)
        if d["step"] == "attach_storage"
    ]
    assert succeeded["details"] == effect.result
    assert effects_by_step(node)["attach_storage"] == [effect.idempotency_key]


def test_attempts_started_by_workers_that_died_count_toward_the_limit(
    fleet: Fleet, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.PROVISIONING_MAX_ATTEMPTS = 2
    settings.SIMULATED_FAULTS = {"allocate_server": {"hang": 1.0}}

    def die_in_the_hang() -> None:
        raise WorkerDied

    monkeypatch.setattr(simulated_module, "_hang", die_in_the_hang)
    node = fleet.node()
    with pytest.raises(WorkerDied):
        provision(node)
    with pytest.raises(WorkerDied):
        provisioning.provisioning_dispatch(node.pk)

    provisioning.provisioning_dispatch(node.pk)  # a third delivery: no attempt left

    assert state_of(node) == NodeState.FAILED
    failed = provisioning_events(node, ev.ProvisioningStepFailed)
    assert [(f["step"], f["attempt"], f["final"]) for f in failed] == [("allocate_server", 2, True)]
    assert "2 attempts started, none finished" in failed[0]["error"]


# --- teardown ------------------------------------------------------------------------------------


def test_decommissioning_tears_down_every_step_of_what_was_provisioned(fleet: Fleet) -> None:
    node = provision(fleet.node())
    run(services.node_transition, node=node, action=NodeAction.DRAIN)  # -> maintenance

    run(services.node_decommission, node=node, reason="end of life")

    node.refresh_from_db()
    assert node.state == NodeState.DECOMMISSIONED
    assert steps_of(node, ev.ProvisioningStepSucceeded, phase="teardown") == [
        (s, 1) for s in TEARDOWN_STEPS
    ]
    details = {
        d["step"]: d["details"] for d in provisioning_events(node, ev.ProvisioningStepSucceeded)
    }
    assert details["release_server"]["server_id"] == details["allocate_server"]["server_id"]
    assert (
        details["revoke_credentials"]["credential_id"]
        == (details["create_credentials"]["credential_id"])
    )
    assert all(details[s]["removed"] for s in TEARDOWN_STEPS)
    for step in TEARDOWN_STEPS:
        assert effects_by_step(node)[step] == [key(node, step, 2, "teardown")]


def test_a_teardown_failure_leaves_the_node_decommissioned_with_the_failed_step(
    fleet: Fleet, settings: Settings
) -> None:
    node = fleet.node()
    settings.SIMULATED_FAULTS = {"detach_storage": {"fail": 1.0, "retryable": False}}

    run(services.node_decommission, node=node)

    assert state_of(node) == NodeState.DECOMMISSIONED
    assert steps_of(node, ev.ProvisioningStepSucceeded) == [("revoke_credentials", 1)]
    failed = provisioning_events(node, ev.ProvisioningStepFailed)
    assert [(f["step"], f["final"]) for f in failed] == [("detach_storage", True)]


# --- reconciliation ----------------------------------------------------------------------------


def test_the_reconciler_dispatches_again_only_unfinished_runs_gone_quiet(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = provision(fleet.node("done"))
    with monkeypatch.context() as lost:  # their messages never reach a worker
        lost.setattr(provisioning, "provisioning_dispatch", lambda node_id, run=None: None)
        stuck = provision(fleet.node("stuck"))
        torn = fleet.node("torn")
        run(services.node_decommission, node=torn)
    assert stuck.state == NodeState.PROVISIONING

    too_soon = provisioning.provisioning_reconcile(stale_after=timedelta(minutes=5))
    later = provisioning.provisioning_reconcile(
        stale_after=timedelta(minutes=5), now=timezone.now() + timedelta(minutes=6)
    )
    again = provisioning.provisioning_reconcile(
        stale_after=timedelta(minutes=5), now=timezone.now() + timedelta(minutes=60)
    )

    assert too_soon == []
    assert sorted(later) == sorted([stuck.pk, torn.pk])
    assert again == []  # both runs finished
    assert state_of(stuck) == NodeState.READY
    assert steps_of(torn, ev.ProvisioningStepSucceeded) == [(s, 1) for s in TEARDOWN_STEPS]
    assert state_of(done) == NodeState.READY
    assert len(steps_of(done, ev.ProvisioningStepSucceeded)) == len(PROVISION_STEPS)


def test_the_reconcile_task_uses_the_stale_threshold_setting(
    fleet: Fleet, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as lost:
        lost.setattr(provisioning, "provisioning_dispatch", lambda node_id, run=None: None)
        stuck = provision(fleet.node("stuck"))

    settings.PROVISIONING_STALE_AFTER_S = 3600
    assert reconcile_provisioning() == 0
    settings.PROVISIONING_STALE_AFTER_S = 0
    assert reconcile_provisioning() == 1
    assert state_of(stuck) == NodeState.READY


def test_a_run_the_operator_abandoned_is_not_continued(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as lost:
        lost.setattr(provisioning, "provisioning_dispatch", lambda node_id, run=None: None)
        node = provision(fleet.node())
    run(services.node_fail, node=node, reason="operator: bad PSU")

    provisioning.provisioning_dispatch(node.pk)

    assert state_of(node) == NodeState.FAILED
    assert provisioning_events(node, ev.ProvisioningStepStarted) == []
    assert provisioning.provisioning_reconcile(stale_after=timedelta(0)) == []


# --- the simulator's dice ----------------------------------------------------------------------


def test_fault_draws_depend_only_on_seed_key_attempt_and_kind() -> None:
    draws = [fault_draw(seed=7, key="n:1:provision:s", attempt=a, kind="fail") for a in range(50)]

    assert draws == [
        fault_draw(seed=7, key="n:1:provision:s", attempt=a, kind="fail") for a in range(50)
    ]
    assert draws != [
        fault_draw(seed=8, key="n:1:provision:s", attempt=a, kind="fail") for a in range(50)
    ]
    strikes = [
        Fault(fail=0.5).strikes("fail", seed=7, key="n:1:provision:s", attempt=a) for a in range(50)
    ]
    assert 10 < sum(strikes) < 40
    assert not any(
        Fault(fail=1.0, first_attempts=2).strikes("fail", seed=7, key="k", attempt=a)
        for a in range(3, 10)
    )


def test_the_backoff_doubles_from_the_base(settings: Settings) -> None:
    settings.PROVISIONING_RETRY_BASE_S = 2

    assert [provisioning.retry_backoff_s(a) for a in (1, 2, 3, 4)] == [2, 4, 8, 16]
