"""What the fleet asks of the scheduler without importing it (the scheduler depends on the
fleet, not the other way; ``neocloud.core.hooks``), and of its own provisioning and tasks,
which sit above the services that set them off. The scheduler registers the first two in its
``AppConfig.ready``, the fleet the others in its own.

- ``node_has_work`` (``call_all``): whether work sits on a node; a drain of a node none
  answers yes for completes at once.
- ``node_failed`` (``call_all``): give back the work of a node that failed, inside the
  transaction that failed it; each answers how many runs it ended.
- ``provisioning_started`` (``on_commit``): dispatch the first step of a node's new run.
- ``provisioning_step_enqueue`` (``call_all``): send one step of a run (node, run) to a worker.
- ``provisioning_step_finished`` (``call_all``): an attempt of a step was performed (phase,
  step, its status ``succeeded``/``retrying``/``failed``, seconds the driver took);
  monitoring registers it. An answer must be cheap and never raise.
- ``volumes_measured`` (``call_all``): a node's agent measured what volumes hold (volume id,
  bytes), inside the heartbeat's transaction; storage registers it.
"""

from __future__ import annotations

import uuid

from inventory.models import Node
from neocloud.core.hooks import Hook

node_has_work: Hook[[Node], bool] = Hook("inventory.node_has_work")
node_failed: Hook[[Node, str], int] = Hook("inventory.node_failed")
provisioning_started: Hook[[uuid.UUID], None] = Hook("inventory.provisioning_started")
provisioning_step_enqueue: Hook[[uuid.UUID, int], None] = Hook(
    "inventory.provisioning_step_enqueue"
)
# (phase, step, status, seconds)
provisioning_step_finished: Hook[[str, str, str, float], None] = Hook(
    "inventory.provisioning_step_finished"
)
volumes_measured: Hook[[Node, list[tuple[uuid.UUID, int]]], None] = Hook(
    "inventory.volumes_measured"
)
