"""Why a workload waits, in words a person can act on, with the figures behind them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from scheduler.engine.capacity import Capacity
from scheduler.engine.model import (
    WHOLE,
    PendingReason,
    Policy,
    ReasonCode,
    Request,
    Reservation,
    Snapshot,
    Topology,
)

CAPACITY_CODES: Final = frozenset({ReasonCode.FRAGMENTED, ReasonCode.INSUFFICIENT, ReasonCode.GANG})


def _gpus(milli: int) -> str:
    return f"{milli / WHOLE:g}"


def no_matching_model(request: Request, snapshot: Snapshot) -> PendingReason:
    fleet = sorted({n.gpu_model for n in snapshot.nodes if n.gpu_model})
    wanted = ", ".join(request.gpu_models) or "any GPU"
    return PendingReason(
        ReasonCode.NO_MATCHING_MODEL,
        f"no node has {wanted}; the cluster has {', '.join(fleet) or 'no GPUs'}",
        {"wanted": list(request.gpu_models), "fleet": fleet},
    )


def volume_locality(request: Request, capacity: PendingReason) -> PendingReason:
    """Work that mounts a local volume goes only where its data lives (or, for a new one, to
    nodes with room), and those are full now; elsewhere it would run without its data."""
    nodes = sorted(request.nodes_allowed or ())
    return PendingReason(
        ReasonCode.VOLUME_LOCALITY,
        f"waits for {', '.join(nodes) or 'a node with room'}, where its volume's data lives:"
        f" {capacity.message}",
        {"nodes": nodes, "capacity": capacity.code.value},
    )


def behind(blocker: Request) -> PendingReason:
    """The reason of every workload ``blocker`` holds back (head-of-line)."""
    return PendingReason(
        ReasonCode.BEHIND_HIGHER_PRIORITY,
        f"waits behind {blocker.id} (priority {blocker.priority}), which needs the same GPUs"
        " first; it would delay it",
        {"blocked_by": blocker.id, "blocker_priority": blocker.priority},
    )


def behind_for_quota(blocker: Request) -> PendingReason:
    """The reason of the work of its queue that ``blocker``, waiting for the queue's quota,
    holds back."""
    return PendingReason(
        ReasonCode.BEHIND_HIGHER_PRIORITY,
        f"waits behind {blocker.id} (priority {blocker.priority}) of the same queue, which"
        " waits for the queue's quota first",
        {"blocked_by": blocker.id, "blocker_priority": blocker.priority, "for": "quota"},
    )


def reserved(request: Request, model: str, held: int, free: int, policy: Policy) -> PendingReason:
    owners = sorted({r.id for r in policy.reservations if r.gpu_model == model})
    return PendingReason(
        ReasonCode.RESERVED,
        f"{free} free {model}, {held} held for reservation {', '.join(owners)}",
        {"gpu_model": model, "free": free, "held": held, "reservations": owners},
    )


def outside_reservation(
    request: Request, model: str, reservation: Reservation | None, now: float
) -> PendingReason:
    """Work on a reservation waits for its window, and never runs on another model."""
    name = request.reservation
    if reservation is None:
        why = f"reservation {name} is not open: it ended or was cancelled"
    elif reservation.gpu_model != model:
        why = f"reservation {name} holds {reservation.gpu_model}, not {model}"
    elif now < reservation.starts_at:
        why = f"reservation {name} opens in {reservation.starts_at - now:.0f} s"
    else:
        why = f"reservation {name} has ended"
    return PendingReason(
        ReasonCode.OUTSIDE_RESERVATION,
        why,
        {"reservation": name, "gpu_model": model, "open": reservation is not None},
    )


def reservation_full(request: Request, reservation: Reservation, used: int) -> PendingReason:
    """Work on a reservation takes at most its GPUs, whatever else is free."""
    free = reservation.gpus * WHOLE - used
    asked = request.demand_on(request.least_nodes)
    plural = "" if reservation.gpus == 1 else "s"
    return PendingReason(
        ReasonCode.RESERVATION_FULL,
        f"reservation {reservation.id} holds {reservation.gpus} GPU{plural}; {_gpus(free)} free"
        f" on it, {_gpus(asked)} asked",
        {
            "reservation": reservation.id,
            "gpus": reservation.gpus,
            "free": free / WHOLE,
            "asked": asked / WHOLE,
        },
    )


def no_room(request: Request, model: str, capacity: Capacity) -> PendingReason:
    """Why the request fits nowhere now: fragmented, insufficient, or a gang too big."""
    # Schedulable nodes of the model, by GPU state: (whole free GPUs, how many such nodes).
    whole: list[tuple[int, int]] = []
    shares: list[int] = []  # free milli-GPU of each GPU of a shareable node, once per state
    for state_id, members in capacity.classes(model):
        gpu_free, _domains, shareable = capacity.states[state_id]
        whole.append((gpu_free.count(WHOLE), len(members)))
        if shareable:
            shares.extend(gpu_free)
    free = sum(count * nodes for count, nodes in whole)
    most = max((count for count, _ in whole), default=0)
    if request.topology is Topology.SINGLE_NODE and request.nodes > 1:
        return PendingReason(
            ReasonCode.TOPOLOGY,
            f"asks for {request.nodes} nodes but also for a single node",
            {"nodes": request.nodes},
        )
    if request.fractional:
        best = max(shares, default=0)
        return PendingReason(
            ReasonCode.INSUFFICIENT if not shares else ReasonCode.FRAGMENTED,
            f"needs {_gpus(request.gpu_milli)} of a shareable {model}; the largest free share"
            f" is {_gpus(best)}",
            {"gpu_model": model, "needed_milli": request.gpu_milli, "largest_free_milli": best},
        )
    needed = request.gpus_per_node * request.nodes
    figures: dict[str, object] = {
        "gpu_model": model,
        "free": free,
        "needed": needed,
        "most_on_one_node": most,
    }
    if request.nodes > 1:
        hosts = sum(nodes for count, nodes in whole if count >= request.gpus_per_node)
        figures["nodes_that_fit"] = hosts
        least = request.least_nodes
        if least < request.nodes:
            figures["min_nodes"] = least
            figures["needed"] = least * request.gpus_per_node
            return PendingReason(
                ReasonCode.GANG,
                f"needs at least {least} nodes x {request.gpus_per_node} {model} at once (up to"
                f" {request.nodes}); {free} schedulable, {hosts} nodes can take"
                f" {request.gpus_per_node}",
                figures,
            )
        return PendingReason(
            ReasonCode.GANG,
            f"needs {needed} {model} at once ({request.nodes} nodes x {request.gpus_per_node});"
            f" {free} schedulable, {hosts} nodes can take {request.gpus_per_node}",
            figures,
        )
    if free >= needed and most < needed:
        return PendingReason(
            ReasonCode.FRAGMENTED,
            f"{free} free {model} in cluster, at most {most} on one node, needs {needed} on one"
            " node",
            figures,
        )
    if free >= needed:
        return PendingReason(
            ReasonCode.INSUFFICIENT,
            f"{free} free {model}, but no node with {needed} free also has"
            f" {request.cpu_milli} milli-CPU and {request.memory_mib} MiB free",
            figures,
        )
    return PendingReason(ReasonCode.INSUFFICIENT, f"needs {needed} {model}, {free} free", figures)


def no_model_fits(by_model: Mapping[str, PendingReason]) -> PendingReason:
    """Why a workload that takes any GPU model waits: each model's reason, by model name; the
    code and figures are the first model's, with every model's code and message beside."""
    first = next(iter(by_model.values()))
    return PendingReason(
        first.code,
        "; ".join(f"{model}: {reason.message}" for model, reason in by_model.items()),
        {
            **first.figures,
            "by_model": {
                model: {"code": reason.code.value, "message": reason.message}
                for model, reason in by_model.items()
            },
        },
    )
