"""Running a benchmark suite from a test: end to end, in its own process, JSON out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def bench_json(suite: str, *, scale: float) -> dict[str, Any]:
    """The JSON object ``manage.py bench SUITE --json`` prints last (figures, never timed)."""
    result = subprocess.run(
        [sys.executable, "manage.py", "bench", suite, "--json", "--scale", str(scale)],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "neocloud.settings", "SECRET_KEY": "bench"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    figures: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures
