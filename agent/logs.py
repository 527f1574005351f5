"""Shipping a run's output to the control plane (PROTOCOL §4).

The output file is the spool: the run writes it directly (so it survives the agent), and the
agent sends it in chunks of at most 64 KiB, from the offset the control plane last asked
for (``next_offset``), which it keeps in the run record. It ships at most ``--log-max-bytes``
of a run; the rest is counted and reported as ``dropped``.
"""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any

from agent.client import Client, Rejected
from agent.state import RunRecord, State

log = logging.getLogger(__name__)

CHUNK_BYTES = 64 * 1024
REQUEST_BYTES = 1024 * 1024


def size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def tail(path: Path, cap: int, size: int = 400) -> str:
    """The last ``size`` bytes kept of the output (past the cap the file is a hole)."""
    end = min(size_of(path), cap) if cap > 0 else size_of(path)
    with open(path, "rb") as file:
        file.seek(max(0, end - size))
        return file.read(end - max(0, end - size)).decode(errors="replace")


def read_chunks(path: Path, start: int, end: int, assignment_id: str) -> list[dict[str, Any]]:
    """The chunks of ``[start, end)`` (at most one request's worth), base64."""
    chunks = []
    end = min(end, start + REQUEST_BYTES)
    with open(path, "rb") as file:
        file.seek(start)
        offset = start
        while offset < end:
            data = file.read(min(CHUNK_BYTES, end - offset))
            if not data:
                break
            chunks.append(
                {
                    "assignment_id": assignment_id,
                    "offset": offset,
                    "data": base64.b64encode(data).decode(),
                }
            )
            offset += len(data)
    return chunks


def shipped(state: State, record: RunRecord, cap: int) -> bool:
    """Whether everything there is to ship of this run (so far) has been acknowledged."""
    if record.log_abandoned:
        return True
    size = size_of(state.output_path(record.assignment_id))
    dropped = max(0, size - cap)
    return record.log_offset >= min(size, cap) and record.log_dropped_sent >= dropped


def ship(client: Client, state: State, record: RunRecord, cap: int) -> bool:
    """Send one request's worth of the run's output; True when nothing is left to send.

    Unreachable and Unauthorized go to the caller (the output waits on disk); a Rejected
    request would be refused forever, so the run's logs are given up (and that is logged)."""
    if shipped(state, record, cap):
        return True
    path = state.output_path(record.assignment_id)
    size = size_of(path)
    end, dropped = min(size, cap), max(0, size - cap)
    chunks = read_chunks(path, record.log_offset, end, record.assignment_id) if end > 0 else []
    losses = []
    if dropped > record.log_dropped_sent:
        losses = [{"assignment_id": record.assignment_id, "bytes": dropped}]
    try:
        answer = client.logs(chunks, losses)
    except Rejected as error:
        log.error("logs of %s refused (%s): not shipped", record.assignment_id, error)
        with state.lock:
            record.log_abandoned = True
            state.save(record)
        return True
    next_offset = (answer.get("next_offset") or {}).get(record.assignment_id)
    with state.lock:
        if isinstance(next_offset, int):
            record.log_offset = next_offset
        if losses:
            record.log_dropped_sent = dropped
        state.save(record)
    return shipped(state, record, cap)
