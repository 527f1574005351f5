"""docs/reference/metrics.md has one row per metric ``/metrics`` answers, with its type and
labels as the registries declare them, and no row for a metric that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client.metrics import MetricWrapperBase

from monitoring import instruments
from monitoring.collector import DatabaseCollector

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "metrics.md"
ROW = re.compile(r"^\| `(neocloud_\w+)` \| (\w+)[^|]*\|([^|]*)\| (.+) \|$", re.MULTILINE)


def _exposed_name(name: str, kind: str | None) -> str:
    """prometheus-client keeps a counter's name without ``_total`` and exposes it with one."""
    return f"{name}_total" if kind == "counter" else name


def documented() -> dict[str, tuple[str, tuple[str, ...]]]:
    return {
        name: (kind, tuple(label.strip() for label in labels.split(",") if label.strip()))
        for name, kind, labels, _ in ROW.findall(PAGE.read_text())
    }


@pytest.mark.django_db
def test_the_page_has_every_metric_with_its_type_and_labels() -> None:
    local = [m for m in instruments.LOCAL._collector_to_names if isinstance(m, MetricWrapperBase)]
    declared = {
        _exposed_name(metric._name, metric._type): (metric._type, tuple(metric._labelnames))
        for metric in local
    }
    for family in DatabaseCollector().collect():
        labels = tuple(getattr(family, "_labelnames", ()))
        declared[_exposed_name(family.name, family.type)] = (family.type, labels)

    assert len(local) == len(instruments.LOCAL._collector_to_names)
    assert "neocloud_pending_workloads" in declared
    assert documented() == declared


def test_every_row_says_what_the_metric_means() -> None:
    meanings = [meaning for *_, meaning in ROW.findall(PAGE.read_text())]

    assert meanings
    assert all(meaning.strip() for meaning in meanings)
