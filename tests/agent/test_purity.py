"""The agent imports nothing of the control plane: it runs on nodes without it."""

from __future__ import annotations

import subprocess
import sys

from tests.agent.conftest import ROOT

# The control plane's packages and frameworks, and pynvml (imported only when NVML is used).
FORBIDDEN = {
    "django", "rest_framework", "celery", "psycopg", "neocloud", "events", "tenants",
    "inventory", "scheduler", "catalog", "orders", "metering", "billing", "bench", "pynvml",
}  # fmt: skip


def test_importing_the_agent_imports_no_django_and_no_app() -> None:
    check = (
        "import sys, agent.cli, agent.shim; "
        "found = sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1:])); "
        "print(found); sys.exit(1 if found else 0)"
    )

    done = subprocess.run(
        [sys.executable, "-c", check, *FORBIDDEN],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
