"""When a waiting workload could start by the running work's estimates: giving the work back
on a ``Room`` (a copy of only the nodes given back to) gives the same answer as weighing the
whole cluster again after every release, and leaves the cluster's capacity as it was."""

from __future__ import annotations

from hypothesis import given

from scheduler.engine import Request, Snapshot
from scheduler.engine.admission import acceptable_models
from scheduler.engine.backfill import Ending, earliest_start, fits
from scheduler.engine.capacity import Capacity
from scheduler.engine.cycle import shapes_of
from scheduler.engine.model import Allocation, Policy
from scheduler.engine.placement import Shapes
from tests.strategies import SETTINGS, scenarios


def _weighed_after_every_release(
    capacity: Capacity,
    ending: list[tuple[float, Allocation]],
    request: Request,
    models: list[str],
    shapes: Shapes,
) -> float:
    for count, (ends_at, _) in enumerate(ending, start=1):
        every_model = {node.gpu_model or "" for node in capacity.nodes.values()}
        trial = capacity.copy(every_model, give=[a for _, a in ending[:count]])
        if fits(trial, request, models, shapes):
            return ends_at
    return float("inf")


@SETTINGS
@given(scenarios())
def test_the_earliest_start_is_the_first_release_after_which_it_fits(
    scenario: tuple[Snapshot, list[Request], Policy],
) -> None:
    snapshot, pending, policy = scenario
    shapes = shapes_of(policy, pending)
    in_fleet = {n.gpu_model for n in snapshot.nodes if n.gpu_model}
    capacity = Capacity(snapshot)
    free_before = {name: (list(f.gpus), f.cpu, f.memory) for name, f in capacity.free.items()}
    for request in pending:
        models = acceptable_models(request, in_fleet)
        ending = list(Ending(snapshot.allocations).of(models))

        start = earliest_start(capacity, iter(ending), request, models, shapes)

        assert start == _weighed_after_every_release(capacity, ending, request, models, shapes)
        # nothing was given back on the cluster's capacity itself
        assert {n: (f.gpus, f.cpu, f.memory) for n, f in capacity.free.items()} == free_before
