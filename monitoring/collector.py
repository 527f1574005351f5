"""The metrics read from the database on each scrape.

State (pending work, GPUs, lag, quota) is a gauge of what the tables say now, so every process
answers the same and none keeps a copy that could drift. The totals and the admission-wait
histogram come from the rows ``projections.Counters`` folds from the log: durable, counted
once, never lower after a restart of anything.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from django.conf import settings
from django.utils import timezone
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from events.selectors import consumer_lags
from monitoring import projections, selectors
from scheduler.selectors.fragmentation import fleet_fragmentation

TOTALS = {
    projections.ADMITTED: ("Workloads admitted (granted GPUs), by queue and priority class.",),
    projections.FINISHED: ("Workloads finished, by queue and outcome.",),
    projections.PREEMPTED: ("Workloads preempted, by queue and preemption reason code.",),
}
TOTAL_LABELS = {
    projections.ADMITTED: ("queue", "priority_class"),
    projections.FINISHED: ("queue", "outcome"),
    projections.PREEMPTED: ("queue", "reason"),
}


class DatabaseCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        clusters = selectors.cluster_slugs()
        yield from self._clusters(clusters)
        yield from self._queues(clusters)
        yield from self._fleet(clusters)
        yield from self._fragmentation()
        yield from self._log()
        yield from self._totals()

    def _clusters(self, clusters: dict[str, str]) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "neocloud_cluster_info",
            "1 for each cluster: its id (the process-local metrics' label) and slug.",
            labels=["cluster_id", "cluster"],
        )
        for cluster_id, slug in sorted(clusters.items(), key=lambda c: c[1]):
            info.add_metric([cluster_id, slug], 1)
        yield info

    def _queues(self, clusters: dict[str, str]) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "neocloud_queue_info",
            "1 for each queue (a project): its organization's and project's slugs.",
            labels=["queue", "organization", "project"],
        )
        if settings.METRICS_TENANT_LABELS:  # tenants' names: opt-in
            for queue, organization, project in selectors.queue_names():
                info.add_metric([queue, organization, project], 1)
        yield info
        pending = GaugeMetricFamily(
            "neocloud_pending_workloads",
            "Workloads waiting (pending or admitted), by cluster, queue and the last cycle's"
            " pending-reason code.",
            labels=["cluster", "queue", "reason"],
        )
        for (cluster_id, queue, reason), n in sorted(selectors.pending_workloads().items()):
            pending.add_metric([clusters.get(cluster_id, cluster_id), queue, reason], n)
        yield pending
        usage = GaugeMetricFamily(
            "neocloud_queue_usage_gpus",
            "GPUs (fractions included) live allocations of a queue hold, by GPU model.",
            labels=["queue", "gpu_model"],
        )
        for (queue, model), gpus in sorted(selectors.queue_usage().items()):
            usage.add_metric([queue, model], gpus)
        yield usage
        quota = GaugeMetricFamily(
            "neocloud_queue_nominal_quota_gpus",
            "A queue's nominal quota (its project's quota), by GPU model.",
            labels=["queue", "gpu_model"],
        )
        for (queue, model), gpus in sorted(selectors.queue_nominal_quota().items()):
            quota.add_metric([queue, model], gpus)
        yield quota

    def _fleet(self, clusters: dict[str, str]) -> Iterator[Metric]:
        gpus = GaugeMetricFamily(
            "neocloud_cluster_gpus",
            "GPUs of the nodes in service by cluster, GPU model and state (free, allocated,"
            " failed, cordoned, provisioning).",
            labels=["cluster", "gpu_model", "state"],
        )
        for (cluster_id, model, state), n in sorted(selectors.gpus_by_state().items()):
            gpus.add_metric([clusters.get(cluster_id, cluster_id), model, state], n)
        yield gpus
        nodes = GaugeMetricFamily(
            "neocloud_cluster_nodes",
            "Nodes in service by cluster and state.",
            labels=["cluster", "state"],
        )
        for (cluster_id, state), n in sorted(selectors.nodes_by_state().items()):
            nodes.add_metric([clusters.get(cluster_id, cluster_id), state], n)
        yield nodes
        utilisation = GaugeMetricFamily(
            "neocloud_gpu_utilization_percent",
            "A GPU's utilisation as its node's agent last reported it.",
            labels=["cluster", "node", "gpu"],
        )
        for reading in selectors.gpu_utilisation():
            utilisation.add_metric(
                [
                    clusters.get(reading.cluster_id, reading.cluster_id),
                    reading.node,
                    str(reading.gpu),
                ],
                reading.percent,
            )
        yield utilisation

    def _fragmentation(self) -> Iterator[Metric]:
        """The seed article's point: free capacity is not schedulable capacity."""
        stranded = GaugeMetricFamily(
            "neocloud_free_unschedulable_gpus",
            "Free GPUs no copy of a shape can use now (free minus startable copies x size), by"
            " cluster, GPU model and shape (GPUs per node, x nodes for a gang).",
            labels=["cluster", "gpu_model", "shape"],
        )
        for model in fleet_fragmentation():
            for fit in model.shapes:
                stranded.add_metric([model.cluster, model.gpu_model, fit.shape.label], fit.stranded)
        yield stranded

    def _log(self) -> Iterator[Metric]:
        head, lags = consumer_lags(now=timezone.now())
        yield GaugeMetricFamily(
            "neocloud_event_log_head_position",
            "The event log's highest committed position.",
            value=head,
        )
        events = GaugeMetricFamily(
            "neocloud_consumer_lag_events",
            "Events a consumer of the log has yet to handle.",
            labels=["consumer"],
        )
        seconds = GaugeMetricFamily(
            "neocloud_consumer_lag_seconds",
            "Age of the oldest event a consumer has yet to handle (0 at the head).",
            labels=["consumer"],
        )
        for lag in lags:
            events.add_metric([lag.name], lag.events)
            seconds.add_metric([lag.name], lag.seconds)
        yield events
        yield seconds

    def _totals(self) -> Iterator[Metric]:
        stored = selectors.stored_counters()
        for name, (help_text,) in TOTALS.items():
            labels = TOTAL_LABELS[name]
            family = CounterMetricFamily(name, help_text, labels=list(labels))
            for series, value in stored.get(name, []):
                family.add_metric([series.get(label, "") for label in labels], value)
            yield family
        wait = HistogramMetricFamily(
            projections.ADMISSION_WAIT,
            "Time from submission (or return to the queue) to admission, by queue and"
            " priority class.",
            labels=["queue", "priority_class"],
        )
        bounds = [_go_float(b) for b in projections.ADMISSION_WAIT_BUCKETS] + ["+Inf"]
        for row in selectors.stored_histograms().get(projections.ADMISSION_WAIT, []):
            series = json.loads(row.labels_json)
            cumulative, buckets = 0, []
            for bound, count in zip(bounds, row.counts, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            wait.add_metric([series["queue"], series["priority_class"]], buckets, row.total)
        yield wait


def _go_float(bound: float) -> str:
    """A bucket's bound as prometheus-client writes ``le`` (``1.0``, ``604800.0``)."""
    written: str = floatToGoString(bound)  # type: ignore[no-untyped-call]
    return written
