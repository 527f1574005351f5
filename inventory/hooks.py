"""What the fleet asks of the scheduler without importing it (the scheduler depends on the
fleet, not the other way; ``neocloud.core.hooks``). The scheduler registers both in its
``AppConfig.ready``.

- ``node_has_work`` (``call_all``): whether work sits on a node; a drain of a node none
  answers yes for completes at once.
- ``node_failed`` (``call_all``): give back the work of a node that failed, inside the
  transaction that failed it; each answers how many runs it ended.
"""

from __future__ import annotations

from inventory.models import Node
from neocloud.core.hooks import Hook

node_has_work: Hook[[Node], bool] = Hook("inventory.node_has_work")
node_failed: Hook[[Node, str], int] = Hook("inventory.node_failed")
