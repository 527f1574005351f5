"""Hypothesis strategies of engine inputs: random fleets, queues, reservations and workloads,
and the settings the engine's property tests run with (shared by the invariants, the stateful
``Scheduler`` tests and the benchmark's check)."""

from __future__ import annotations

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st

from scheduler.engine import (
    Decisions,
    Node,
    Policy,
    QueueConfig,
    Request,
    Reservation,
    Snapshot,
    Topology,
    schedule,
)
from scheduler.engine.model import WHOLE

MODELS = ("h100", "t4")
QUEUES = ("qa", "qb", "qc")
NOW = 50_000.0


@st.composite
def fleets(draw: st.DrawFn) -> tuple[Node, ...]:
    count = draw(st.integers(1, 6))
    result = []
    for i in range(count):
        gpus = draw(st.sampled_from([1, 2, 4, 8]))
        domains = draw(st.sampled_from([1, 2])) if gpus >= 2 else 1
        result.append(
            Node(
                name=f"n{i}",
                gpu_model=draw(st.sampled_from(MODELS)),
                gpu_domains=tuple(g * domains // gpus for g in range(gpus)),
                cpu_milli=draw(st.sampled_from([8_000, 32_000, 96_000])),
                memory_mib=draw(st.sampled_from([65_536, 262_144])),
                rack=f"r{draw(st.integers(0, 2))}",
                schedulable=draw(st.booleans()) or i == 0,
                shareable=draw(st.booleans()),
            )
        )
    return tuple(result)


@st.composite
def requests(draw: st.DrawFn, prefix: str) -> list[Request]:
    result = []
    for i in range(draw(st.integers(0, 10))):
        fractional = draw(st.booleans()) and draw(st.booleans())
        nodes = 1 if fractional else draw(st.sampled_from([1, 1, 1, 2, 3]))
        # Sometimes an elastic gang: at least ``min_nodes`` of its nodes.
        min_nodes = draw(st.sampled_from([None, None, *range(1, nodes + 1)])) if nodes > 1 else None
        result.append(
            Request(
                id=f"{prefix}{i}",
                queue=draw(st.sampled_from(QUEUES)),
                gpus_per_node=1 if fractional else draw(st.sampled_from([1, 2, 4, 8])),
                nodes=nodes,
                gpu_milli=draw(st.sampled_from([250, 500])) if fractional else WHOLE,
                cpu_milli=draw(st.sampled_from([0, 4_000, 16_000])),
                memory_mib=draw(st.sampled_from([0, 32_768])),
                gpu_models=draw(st.sampled_from([(), ("h100",), ("t4",), ("t4", "h100")])),
                priority=draw(st.integers(0, 3)),
                preemptible=draw(st.booleans()),
                topology=draw(st.sampled_from(list(Topology))),
                runtime_estimate_s=draw(st.sampled_from([None, 600.0, 7200.0])),
                organization=draw(st.sampled_from(["o1", "o2"])),
                submitted_at=float(draw(st.integers(0, int(NOW)))),
                min_nodes=min_nodes,
            )
        )
    return result


@st.composite
def open_reservations(draw: st.DrawFn) -> tuple[Reservation, ...]:
    """Mostly one reservation, open now (what the reservation invariant checks)."""
    if not draw(st.integers(0, 3)):
        return ()
    reservation = Reservation(
        "res",
        queue=draw(st.sampled_from(QUEUES)),
        gpu_model=draw(st.sampled_from(MODELS)),
        gpus=draw(st.integers(1, 8)),
        starts_at=NOW - 100,
        ends_at=NOW + 3600,
    )
    return (reservation,)


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    queues = {}
    for name in QUEUES:
        if draw(st.booleans()):
            queues[name] = QueueConfig(
                name=name,
                cohort=draw(st.sampled_from(["", "lab"])),
                nominal={m: draw(st.integers(0, 12)) for m in MODELS},
                borrowing_limit=draw(st.sampled_from([None, 0, 2, 8])),
                lending_limit=draw(st.sampled_from([None, 0, 4])),
                weight=draw(st.sampled_from([1.0, 2.0])),
            )
    reservations = draw(open_reservations())
    # Sometimes organizations with a quota of their own, below what their queues add up to.
    organizations = {
        organization: {m: draw(st.integers(0, 10)) for m in MODELS}
        for organization in ("o1", "o2")
        if draw(st.booleans())
    }
    # Sometimes typical shapes that name their CPU: the CPU-aware placement path.
    cpu_aware: dict[tuple[int, ...], float] = {(1, 1000, 1, 4_000): 2.0, (8, 1000, 1, 32_000): 1.0}
    shapes = draw(st.sampled_from([{}, cpu_aware]))
    return Policy(
        queues=queues,
        organizations=organizations,
        reservations=reservations,
        backfill=draw(st.booleans()),
        typical_shapes=shapes,
    )


@st.composite
def general_scenarios(draw: st.DrawFn) -> tuple[Snapshot, list[Request], Policy]:
    """Anything: a random fleet, policy, running work and arrivals (rarely a hard case)."""
    fleet = draw(fleets())
    policy = draw(policies())
    # Running work is whatever an earlier cycle granted: a reachable state.
    earlier = schedule(Snapshot(fleet), draw(requests("old")), policy, NOW - 1000)
    return Snapshot(fleet, earlier.allocations), draw(requests("new")), policy


# The hard cases, each a scenario built around it: the cycle at ``NOW`` is likely (not sure) to
# reach it. Running work is again what a cycle at ``NOW - 1000`` granted; a few random
# arrivals ride along, so the case is not reached alone.


def _uniform_fleet(draw: st.DrawFn, least: int, most: int) -> tuple[Node, ...]:
    """Nodes of one model (h100) alike but for their rack, sometimes a t4 node beside them."""
    gpus = draw(st.sampled_from([4, 8]))
    domains = draw(st.sampled_from([1, 2]))
    nodes = [
        Node(
            name=f"n{i}",
            gpu_model="h100",
            gpu_domains=tuple(g * domains // gpus for g in range(gpus)),
            cpu_milli=96_000,
            memory_mib=262_144,
            rack=f"r{draw(st.integers(0, 1))}",
            shareable=draw(st.booleans()) and draw(st.booleans()),
        )
        for i in range(draw(st.integers(least, most)))
    ]
    if draw(st.booleans()):
        nodes.append(Node("t0", "t4", (0, 0, 0, 0), 32_000, 65_536))
    return tuple(nodes)


@st.composite
def _work(
    draw: st.DrawFn,
    prefix: str,
    queues: tuple[str, ...],
    priorities: tuple[int, int],
    count: tuple[int, int],
    *,
    preemptible: bool | None = None,
    gpus: tuple[int, ...] = (1, 2, 4, 8),
    nodes: tuple[int, ...] = (1, 1, 1, 2),
    reservation: str | None = None,
) -> list[Request]:
    """Whole-GPU work on h100 (``preemptible`` None: either), with some elastic gangs."""
    result = []
    for i in range(draw(st.integers(*count))):
        size = draw(st.sampled_from(nodes))
        least = draw(st.sampled_from([None, None, 1])) if size > 1 else None
        result.append(
            Request(
                id=f"{prefix}{i}",
                queue=draw(st.sampled_from(queues)),
                gpus_per_node=draw(st.sampled_from(gpus)),
                nodes=size,
                cpu_milli=draw(st.sampled_from([0, 4_000])),
                gpu_models=draw(st.sampled_from([(), ("h100",)])),
                priority=draw(st.integers(*priorities)),
                preemptible=draw(st.booleans()) if preemptible is None else preemptible,
                topology=draw(st.sampled_from([Topology.ANY, Topology.ANY, Topology.SAME_RACK])),
                runtime_estimate_s=draw(st.sampled_from([None, 600.0, 7200.0])),
                organization=draw(st.sampled_from(["o1", "o2"])),
                submitted_at=float(draw(st.integers(0, int(NOW) - 2000))),
                min_nodes=least,
                reservation=reservation,
            )
        )
    return result


def _scenario(
    draw: st.DrawFn,
    fleet: tuple[Node, ...],
    policy: Policy,
    running: list[Request],
    arriving: list[Request],
) -> tuple[Snapshot, list[Request], Policy]:
    earlier = schedule(Snapshot(fleet), running, policy, NOW - 1000)
    noise = draw(requests("x"))[: draw(st.integers(0, 2))]
    return Snapshot(fleet, earlier.allocations), arriving + noise, policy


@st.composite
def crowded(draw: st.DrawFn) -> tuple[Snapshot, list[Request], Policy]:
    """A full cluster of low-priority preemptible work, and higher-priority arrivals (priority
    preemption)."""
    fleet = _uniform_fleet(draw, 2, 4)
    running = draw(_work("old", QUEUES, (0, 1), (4, 12), preemptible=True))
    arriving = draw(_work("new", QUEUES, (1, 3), (1, 3), nodes=(1, 2, 2, 3)))
    policy = Policy(reservations=draw(open_reservations()), backfill=draw(st.booleans()))
    return _scenario(draw, fleet, policy, running, arriving)


@st.composite
def gangs(draw: st.DrawFn) -> tuple[Snapshot, list[Request], Policy]:
    """Gangs too big for one node, on a fleet that sometimes has the room for them."""
    fleet = _uniform_fleet(draw, 2, 6)
    running = draw(_work("old", QUEUES, (0, 3), (0, 4)))
    arriving = draw(_work("new", QUEUES, (0, 3), (1, 4), gpus=(4, 8), nodes=(2, 2, 3, 4)))
    policy = Policy(reservations=draw(open_reservations()), backfill=draw(st.booleans()))
    return _scenario(draw, fleet, policy, running, arriving)


@st.composite
def reclaims(draw: st.DrawFn) -> tuple[Snapshot, list[Request], Policy]:
    """Queues of a cohort borrowing the owner's idle quota until the cluster is full, then the
    owner's work within its nominal quota (reclaim)."""
    fleet = _uniform_fleet(draw, 1, 4)
    total = sum(n.gpu_count for n in fleet if n.gpu_model == "h100")
    owner = draw(st.integers(total // 2, total))
    queues = {
        "qa": QueueConfig("qa", cohort="lab", nominal={"h100": owner}),
        "qb": QueueConfig(
            "qb",
            cohort="lab",
            nominal={"h100": total - owner},
            borrowing_limit=draw(st.sampled_from([None, owner])),
        ),
        "qc": QueueConfig("qc", cohort="lab", nominal={"h100": 0}),
    }
    policy = Policy(
        queues=queues, reservations=draw(open_reservations()), backfill=draw(st.booleans())
    )
    running = draw(_work("old", ("qb", "qc"), (0, 3), (4, 12)))
    arriving = draw(_work("new", ("qa",), (0, 3), (1, 3), gpus=(1, 2, 4), nodes=(1, 1, 2)))
    return _scenario(draw, fleet, policy, running, arriving)


@st.composite
def own_quota(draw: st.DrawFn) -> tuple[Snapshot, list[Request], Policy]:
    """A queue whose quota its own low-priority preemptible work takes, on a cluster with room
    to spare, and its higher-priority arrivals (preemption for quota)."""
    fleet = _uniform_fleet(draw, 2, 4)
    nominal = draw(st.integers(2, 8))
    queues = {"qa": QueueConfig("qa", nominal={"h100": nominal, "t4": 4})}
    organizations = {"o1": {"h100": nominal}} if draw(st.booleans()) else {}
    policy = Policy(queues=queues, organizations=organizations, backfill=draw(st.booleans()))
    running = draw(_work("old", ("qa",), (0, 1), (2, 8), preemptible=True, gpus=(1, 2, 4)))
    arriving = draw(_work("new", ("qa",), (1, 3), (1, 3), gpus=(1, 2, 4)))
    return _scenario(draw, fleet, policy, running, arriving)


@st.composite
def reservations_opening(draw: st.DrawFn) -> tuple[Snapshot, list[Request], Policy]:
    """Preemptible work of others on a reservation's capacity before its window opened, and the
    owner's work on it now (eviction for a reservation); sometimes a window already closed or
    not yet open, or work naming a reservation its queue does not own."""
    fleet = _uniform_fleet(draw, 1, 4)
    total = sum(n.gpu_count for n in fleet if n.gpu_model == "h100")
    window = draw(
        st.sampled_from([(-100, 3600), (-100, 3600), (-100, 3600), (600, 3600), (-3600, -1)])
    )
    reservation = Reservation(
        "res",
        queue="qa",
        gpu_model=draw(st.sampled_from(["h100", "h100", "h100", "t4"])),
        gpus=draw(st.integers(1, total)),
        starts_at=NOW + window[0],
        ends_at=NOW + window[1],
    )
    policy = Policy(reservations=(reservation,), backfill=draw(st.booleans()))
    running = draw(_work("old", ("qb", "qc"), (1, 3), (6, 14), preemptible=True))
    owner = draw(st.sampled_from(["qa", "qa", "qa", "qb"]))
    arriving = draw(_work("new", (owner,), (0, 1), (1, 3), gpus=(1, 2, 4), reservation="res"))
    return _scenario(draw, fleet, policy, running, arriving)


def scenarios() -> st.SearchStrategy[tuple[Snapshot, list[Request], Policy]]:
    """Engine inputs: the general case mixed with each hard case (gangs and reservations
    twice: they are reached least often)."""
    return st.one_of(
        general_scenarios(),
        gangs(),
        gangs(),
        crowded(),
        reclaims(),
        own_quota(),
        reservations_opening(),
        reservations_opening(),
    )


SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def open_reservation(policy: Policy) -> Reservation | None:
    """The policy's reservation when it is open at ``NOW`` (the strategies make at most one)."""
    for reservation in policy.reservations:
        if reservation.starts_at <= NOW < reservation.ends_at:
            return reservation
    return None


def decided(scenario: tuple[Snapshot, list[Request], Policy]) -> Decisions:
    """The cycle at ``NOW`` on ``scenario``, each hard case it reached told to hypothesis's
    statistics (``pytest --hypothesis-show-statistics``)."""
    snapshot, pending, policy = scenario
    decisions = schedule(snapshot, pending, policy, NOW)
    for label in reached(snapshot, decisions, policy):
        event(label)
    return decisions


def reached(snapshot: Snapshot, decisions: Decisions, policy: Policy) -> list[str]:
    """The hard cases one cycle reached, as labels for ``hypothesis.event`` (and the share each
    is reached in, ``scripts/engine_scenario_shares.py``)."""
    labels = []
    if any(len(a.placements) > 1 for a in decisions.allocations):
        labels.append("multi-node gang granted")
    if decisions.preemptions:
        labels.append("any preemption")
    for code in sorted({p.code for p in decisions.preemptions}):
        labels.append(f"preemption: {code}")
    if not decisions.allocations:
        labels.append("nothing granted")
    reservation = open_reservation(policy)
    if reservation is not None:
        labels.append("reservation invariant checked")
        model = reservation.gpu_model
        owner = sum(
            a.gpu_milli
            for a in snapshot.allocations
            if a.queue == reservation.queue and a.gpu_model == model
        )
        others = [
            a
            for a in decisions.allocations
            if a.queue != reservation.queue and a.gpu_model == model
        ]
        if reservation.gpus * WHOLE > owner and others:
            labels.append("reservation invariant binding")
    return labels
