"""The operators' capacity and fragmentation page: the fleet's figures now, and the samples of
the last ``CHART_HOURS`` as chart series."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from scheduler.engine.fragmentation import TYPICAL_SHAPES
from scheduler.selectors.fragmentation import (
    ModelCapacity,
    fleet_fragmentation,
    fragmentation_history,
)

CHART_HOURS = 24


@dataclass(frozen=True)
class CapacityPanel:
    """One cluster's GPU model: its table now, and its chart (None: no samples yet)."""

    figures: ModelCapacity
    chart_id: str
    chart: dict[str, Any] | None

    @property
    def data_id(self) -> str:
        """The id of the chart's ``json_script``."""
        return f"{self.chart_id}-data"


def _series(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Times, and per shape the copies startable and held-if-together at each time."""
    times = sorted({s["at"] for s in samples})
    index = {at: i for i, at in enumerate(times)}
    shapes = [shape.label for shape in TYPICAL_SHAPES]
    startable: dict[str, list[int | None]] = {label: [None] * len(times) for label in shapes}
    would_hold: dict[str, list[int | None]] = {label: [None] * len(times) for label in shapes}
    for sample in samples:
        if sample["shape"] in startable:
            startable[sample["shape"]][index[sample["at"]]] = sample["startable"]
            would_hold[sample["shape"]][index[sample["at"]]] = sample["would_hold"]
    return {
        "times": [at.strftime("%Y-%m-%d %H:%M") for at in times],
        "shapes": [
            {"shape": label, "startable": startable[label], "would_hold": would_hold[label]}
            for label in shapes
        ],
    }


def capacity_panels(now: datetime) -> list[CapacityPanel]:
    history = fragmentation_history(now - timedelta(hours=CHART_HOURS))
    panels = []
    for number, figures in enumerate(fleet_fragmentation()):
        samples = history.get((figures.cluster_id, figures.gpu_model))
        panels.append(
            CapacityPanel(
                figures=figures,
                chart_id=f"nc-fragmentation-{number}",
                chart=_series(samples) if samples else None,
            )
        )
    return panels
