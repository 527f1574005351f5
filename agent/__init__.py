"""The node agent: runs a node's assignments and reports on them to the control plane.

It imports nothing of the control plane (no Django, none of the project's apps): it speaks to
it only over HTTP, by the contract of issue 13 (docs/operations/node-agent.md).
"""

from importlib.metadata import version

# pyproject's version (the control plane reads the same: ``neocloud.__version__``); reported in
# every heartbeat and as the User-Agent, so operators see which agents to upgrade.
VERSION = version("neocloud")
