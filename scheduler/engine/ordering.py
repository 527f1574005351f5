"""The order in which a cycle considers pending work: effective priority (with aging), then
fair share, then arrival, then id."""

from __future__ import annotations

from collections.abc import Sequence
from operator import sub
from typing import Final

from scheduler.engine.fairshare import effective_priority
from scheduler.engine.model import Policy, Request

# Effective priorities this far apart round apart at 9 decimals: only closer ones need the
# rest of the key to be ordered.
_NEAR: Final = 1e-8


def ordered(pending: Sequence[Request], policy: Policy, now: float) -> list[Request]:
    """Effective priority (with aging, rounded to 9 decimals), then fair share of the
    organization, then of the queue, then arrival, then id; the same order for the same
    requests in any order.

    Sorted by effective priority alone, then the runs of near-equal ones by the whole key:
    the same order as sorting by the whole key, at a fraction of the cost when aging is
    continuous (with steps, the runs are long: fair share orders them).

    A share is decayed usage over weight (``usage_history`` per queue,
    ``organization_usage`` per organization); an organization weighs as its queues do on
    average (1 without any)."""
    weights = {name: max(q.weight, 1e-9) for name, q in policy.queues.items()}
    organization_weights: dict[str, list[float]] = {}
    for name, config in policy.queues.items():
        organization_weights.setdefault(config.organization, []).append(weights[name])
    history, organization_history = policy.usage_history, policy.organization_usage
    groups = list(dict.fromkeys((r.organization, r.queue) for r in pending))
    shares: dict[tuple[str, str], tuple[float, float]] = {}
    for organization, queue in groups:
        own = organization_weights.get(organization)
        weight = sum(own) / len(own) if own else 1.0
        shares[(organization, queue)] = (
            round(organization_history.get(organization, 0.0) / weight, 9),
            round(history.get(queue, 0.0) / weights.get(queue, 1.0), 9),
        )
    # One rank per (organization, queue) by their shares (equal shares, equal ranks).
    rank_of = {pair: i for i, pair in enumerate(sorted(set(shares.values())))}
    rank: dict[str, dict[str, int]] = {}
    for (organization, queue), pair in shares.items():
        rank.setdefault(organization, {})[queue] = rank_of[pair]
    per_hour, step = policy.aging_priority_per_hour, policy.aging_step_s
    priorities = [
        effective_priority(r.priority, now - r.submitted_at, per_hour, step) for r in pending
    ]
    order = sorted(range(len(pending)), key=priorities.__getitem__, reverse=True)
    descending = [priorities[i] for i in order]
    near = [k for k, gap in enumerate(map(sub, descending, descending[1:])) if gap < _NEAR]

    def key(i: int) -> tuple[float, int, float, str, int]:
        r = pending[i]
        return (-round(priorities[i], 9), rank[r.organization][r.queue], r.submitted_at, r.id, i)

    at = 0
    while at < len(near):  # each run of near-equal priorities: order[start : end + 1]
        start = end = near[at]
        while at + 1 < len(near) and near[at + 1] == end + 1:
            at += 1
            end += 1
        order[start : end + 2] = sorted(order[start : end + 2], key=key)
        at += 1
    return [pending[i] for i in order]
