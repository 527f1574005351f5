"""The node lifecycle: every allowed and every forbidden transition."""

from __future__ import annotations

import itertools

import pytest

from events import store
from inventory import services
from inventory.errors import InvalidTransition
from inventory.lifecycle import NodeAction, NodeState, next_state
from inventory.models import Node
from tests.builders.fleet import OPERATOR, cluster, node, put_in_state

A, S = NodeAction, NodeState
# The lifecycle as the issue states it, written out independently of inventory.lifecycle.
ALLOWED = {
    (S.REGISTERED, A.PROVISION): S.PROVISIONING,
    (S.MAINTENANCE, A.PROVISION): S.PROVISIONING,
    (S.FAILED, A.PROVISION): S.PROVISIONING,
    (S.PROVISIONING, A.BECOME_READY): S.READY,
    (S.READY, A.CORDON): S.CORDONED,
    (S.CORDONED, A.UNCORDON): S.READY,
    (S.MAINTENANCE, A.UNCORDON): S.READY,
    (S.READY, A.DRAIN): S.DRAINING,
    (S.CORDONED, A.DRAIN): S.DRAINING,
    (S.DRAINING, A.MAINTENANCE): S.MAINTENANCE,
    (S.PROVISIONING, A.FAIL): S.FAILED,
    (S.READY, A.FAIL): S.FAILED,
    (S.CORDONED, A.FAIL): S.FAILED,
    (S.DRAINING, A.FAIL): S.FAILED,
    (S.REGISTERED, A.DECOMMISSION): S.DECOMMISSIONED,
    (S.MAINTENANCE, A.DECOMMISSION): S.DECOMMISSIONED,
    (S.FAILED, A.DECOMMISSION): S.DECOMMISSIONED,
}
EVERY_PAIR = list(itertools.product(NodeState, NodeAction))


@pytest.mark.parametrize(("state", "action"), EVERY_PAIR, ids=[f"{s}-{a}" for s, a in EVERY_PAIR])
def test_the_table_allows_exactly_the_specified_transitions(
    state: NodeState, action: NodeAction
) -> None:
    assert next_state(state, action) == ALLOWED.get((state, action))


def _apply(target: Node, action: NodeAction) -> Node:
    if action is A.PROVISION:
        return services.node_provision(actor=OPERATOR, node=target)
    if action is A.DECOMMISSION:
        return services.node_decommission(actor=OPERATOR, node=target, reason="test")
    if action is A.FAIL:
        return services.node_fail(actor=OPERATOR, node=target, reason="test")
    return services.node_transition(actor=OPERATOR, node=target, action=action, reason="test")


OPERATOR_ACTIONS = [a for a in NodeAction if a is not A.BECOME_READY]
SERVICE_PAIRS = list(itertools.product(NodeState, OPERATOR_ACTIONS))


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("state", "action"), SERVICE_PAIRS, ids=[f"{s}-{a}" for s, a in SERVICE_PAIRS]
)
def test_services_apply_allowed_and_refuse_forbidden_transitions(
    state: NodeState, action: NodeAction
) -> None:
    target = put_in_state(node(cluster())[0], state)
    version = target.version

    if (state, action) in ALLOWED:
        after = _apply(target, action)
        expected = ALLOWED[(state, action)]
        if action is A.DRAIN:  # nothing runs on the node: the drain completes at once
            expected = S.MAINTENANCE
        assert after.state == expected
        assert after.version > version
    else:
        with pytest.raises(InvalidTransition) as refused:
            _apply(target, action)
        assert refused.value.http_status == 409
        assert refused.value.details["state"] == state.value
        assert Node.objects.get(pk=target.pk).state == state
        assert store.stream_version("node", str(target.pk)) == version


@pytest.mark.django_db
def test_every_transition_is_an_event_with_its_reason() -> None:
    target, _ = node(cluster())
    services.node_provision(actor=OPERATOR, node=target)

    events = store.read_stream("node", str(target.pk))

    assert [e.type for e in events] == [
        "inventory.NodeRegistered",
        "inventory.NodeStateChanged",
        "inventory.ProvisioningStarted",
    ]
    assert events[1].data == {
        "action": "provision",
        "from_state": "registered",
        "to_state": "provisioning",
        "reason": "provisioning run 1",
    }
    assert events[1].metadata["actor"] == "system:tests"
