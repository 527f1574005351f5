"""What volumes ask of the scheduler without importing it (``neocloud.core.hooks``); the
scheduler registers the answer in its ``AppConfig.ready``.

- ``volume_in_use`` (``first``): the name of a workload not yet finished that mounts the
  volume, or None; a volume is deleted only when none answers.
"""

from __future__ import annotations

import uuid

from neocloud.core.hooks import Hook

volume_in_use: Hook[[uuid.UUID, uuid.UUID], str | None] = Hook("storage.volume_in_use")
