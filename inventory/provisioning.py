"""Provisioning runs: placeholder replaced by the provisioning worker code."""

from __future__ import annotations

from uuid import UUID


def provisioning_dispatch(node_id: UUID) -> None:
    """Enqueue the next step of the node's current run."""
    raise NotImplementedError
