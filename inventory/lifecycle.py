"""The node lifecycle as a table: which action leads from which states to which state.

Pure Python, so the table can be read (and tested) on its own::

    registered ─provision→ provisioning ─ready→ ready ⇄ cordoned
    ready/cordoned ─drain→ draining ─maintenance→ maintenance ─provision/uncordon→ …
    provisioning/ready/cordoned/draining ─fail→ failed ─provision→ provisioning
    registered/maintenance/failed ─decommission→ decommissioned
"""

from __future__ import annotations

import enum


class NodeState(enum.StrEnum):
    REGISTERED = "registered"
    PROVISIONING = "provisioning"
    READY = "ready"
    CORDONED = "cordoned"
    DRAINING = "draining"
    MAINTENANCE = "maintenance"
    FAILED = "failed"
    DECOMMISSIONED = "decommissioned"


class NodeAction(enum.StrEnum):
    PROVISION = "provision"
    BECOME_READY = "become_ready"
    CORDON = "cordon"
    UNCORDON = "uncordon"
    DRAIN = "drain"
    MAINTENANCE = "maintenance"
    FAIL = "fail"
    DECOMMISSION = "decommission"


S = NodeState
TRANSITIONS: dict[NodeAction, tuple[frozenset[NodeState], NodeState]] = {
    NodeAction.PROVISION: (frozenset({S.REGISTERED, S.MAINTENANCE, S.FAILED}), S.PROVISIONING),
    NodeAction.BECOME_READY: (frozenset({S.PROVISIONING}), S.READY),
    NodeAction.CORDON: (frozenset({S.READY}), S.CORDONED),
    NodeAction.UNCORDON: (frozenset({S.CORDONED, S.MAINTENANCE}), S.READY),
    NodeAction.DRAIN: (frozenset({S.READY, S.CORDONED}), S.DRAINING),
    NodeAction.MAINTENANCE: (frozenset({S.DRAINING}), S.MAINTENANCE),
    NodeAction.FAIL: (
        frozenset({S.PROVISIONING, S.READY, S.CORDONED, S.DRAINING}),
        S.FAILED,
    ),
    NodeAction.DECOMMISSION: (
        frozenset({S.REGISTERED, S.MAINTENANCE, S.FAILED}),
        S.DECOMMISSIONED,
    ),
}

# Only ready nodes take new placements; the others keep what they run (or lost it).
SCHEDULABLE = frozenset({S.READY})


def next_state(current: NodeState, action: NodeAction) -> NodeState | None:
    """The state ``action`` leads to from ``current``, or None when it is not allowed."""
    sources, target = TRANSITIONS[action]
    return target if current in sources else None


def allowed_actions(current: NodeState) -> list[NodeAction]:
    return [action for action, (sources, _) in TRANSITIONS.items() if current in sources]
