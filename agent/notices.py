"""Preemption with notice (issue 32): the file a run finds in its working directory when it
is about to be stopped, beside the SIGTERM its processes get.

``<working dir>/.neocloud/notice.json``: ``{"reason", "deadline", "grace_s", "given_at"}``.
The agent is root and the working directory is the run's: the file is written through
directory descriptors that follow no link the run could have planted, only in a directory
the run's uid owns, and is handed to that uid.
"""

from __future__ import annotations

import json
import logging
import os
import time
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger(__name__)

DIRECTORY = ".neocloud"
FILE = "notice.json"
TEMPORARY = ".notice.json.tmp"
REASONS = ("preempted", "max_runtime")


@dataclass(frozen=True)
class Notice:
    """The run is stopped at ``deadline`` (the control plane's clock, ISO 8601); ``grace_s``
    was left of it when listed, and is what this agent waits, on its own clock."""

    reason: str
    deadline: str
    grace_s: float

    @classmethod
    def parse(cls, data: Any) -> Notice | None:
        """None for none; raises ValueError on a notice the agent cannot act on."""
        if data is None:
            return None
        if not isinstance(data, dict) or data.get("reason") not in REASONS:
            raise ValueError(f"notice: {data!r}")
        grace = float(data.get("grace_s", 0))
        if grace < 0:
            raise ValueError(f"notice: grace_s {grace}")
        return cls(
            reason=str(data["reason"]), deadline=str(data.get("deadline", "")), grace_s=grace
        )

    def document(self) -> str:
        given = datetime.fromtimestamp(time.time(), UTC).isoformat()
        return json.dumps(
            {
                "reason": self.reason,
                "deadline": self.deadline,
                "grace_s": self.grace_s,
                "given_at": given,
            }
        )


def write(work_dir: str, uid: int | None, notice: Notice) -> bool:
    """Write the notice file in ``work_dir`` for ``uid`` (None: the agent is not root and
    runs runs as itself); whether it was written."""
    try:
        _write(work_dir, uid, notice.document().encode())
    except OSError as error:
        log.warning("notice file not written in %s: %s", work_dir, error)
        return False
    return True


def _write(work_dir: str, uid: int | None, text: bytes) -> None:
    nofollow = os.O_DIRECTORY | os.O_NOFOLLOW | os.O_RDONLY
    top = os.open(work_dir, nofollow)
    try:
        if uid is not None and os.fstat(top).st_uid != uid:
            raise PermissionError(f"{work_dir} is not the run's")
        with suppress(FileExistsError):
            os.mkdir(DIRECTORY, 0o700, dir_fd=top)
        inner = os.open(DIRECTORY, nofollow, dir_fd=top)
    finally:
        os.close(top)
    if uid is not None:
        os.fchown(inner, uid, uid)  # made by root just now, or the run's already
    try:
        with suppress(FileNotFoundError):
            os.unlink(TEMPORARY, dir_fd=inner)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(TEMPORARY, flags, 0o600, dir_fd=inner)
        try:
            os.write(fd, text)
            if uid is not None:
                os.fchown(fd, uid, uid)
        finally:
            os.close(fd)
        os.replace(TEMPORARY, FILE, src_dir_fd=inner, dst_dir_fd=inner)
    finally:
        os.close(inner)
