"""The Prometheus configuration, alert rules and Grafana dashboard in ``deploy/`` are valid, and
name only metrics that exist."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool is not on PATH (Debian's prometheus package; scripts/with-services.sh"
    " installs it where it can)",
)
METRICS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "metrics.md"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, *args], capture_output=True, text=True, timeout=60, check=False
    )


@needs_promtool
def test_the_alert_rules_pass_promtool() -> None:
    result = _promtool("check", "rules", str(DEPLOY / "prometheus" / "alerts.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_the_scrape_configuration_passes_promtool() -> None:
    # The token's file exists only on the Prometheus host: check the syntax here.
    result = _promtool(
        "check", "config", "--syntax-only", str(DEPLOY / "prometheus" / "prometheus.yml")
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_rules_and_dashboard_name_only_documented_metrics() -> None:
    documented = set(re.findall(r"^\| `(neocloud_\w+)`", METRICS_PAGE.read_text(), re.MULTILINE))
    used = set()
    for path in (DEPLOY / "prometheus" / "alerts.yml", DEPLOY / "grafana" / "neocloud.json"):
        used |= set(re.findall(r"neocloud_[a-z_]+", path.read_text()))
    suffixes = ("_bucket", "_count", "_sum")
    bare = {next((u[: -len(s)] for s in suffixes if u.endswith(s)), u) for u in used}
    assert documented
    assert bare <= documented, bare - documented
    json.loads((DEPLOY / "grafana" / "neocloud.json").read_text())
