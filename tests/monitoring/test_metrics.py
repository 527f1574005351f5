"""``/metrics`` after a scenario with known outcomes shows exactly them; the log-derived totals
count each event once however often their consumer runs; the endpoint is protected."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families

from events import projections
from events.consumers import ProjectionConsumer, consumer_catch_up
from events.replay import projections_replay
from monitoring import projections as counters
from monitoring.models import MetricHistogram
from scheduler import tasks
from scheduler.models import Workload
from tests.builders import Builder
from tests.scheduler.conftest import Tenant, ready_fleet
from tests.scheduler.test_preemption_events import _queue as _quota
from tests.scheduler.test_preemption_events import _submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

LONG_S = 600  # nothing that runs ends while the test looks
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _scrape(client: Client | None = None) -> Samples:
    response = (client or Client()).get("/metrics")
    assert response.status_code == 200, response.content
    samples: Samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[sample.name, frozenset(sample.labels.items())] = sample.value
    return samples


def _series(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: value for (n, labels), value in samples.items() if n == name}


def _labels(**labels: str) -> frozenset[tuple[str, str]]:
    return frozenset(labels.items())


def _consume() -> int:
    (projection,) = [p for p in projections.asynchronous() if p.name == counters.Counters.name]
    return consumer_catch_up(ProjectionConsumer(projection))


class Scenario:
    """On two nodes of 8 GPUs: in project B one short job succeeds; in project A (quota 2) a
    low job runs until a production job takes its quota (a quota preemption), then it waits
    on quota and another low job behind it; in B again two jobs of 5 GPUs run and one of 4 on
    a single node waits, fragmented (1 + 3 free)."""

    def __init__(self, build: Builder, tenant: Tenant) -> None:
        self.fleet = ready_fleet(nodes=2, gpus=8)
        self.a = tenant.project
        self.b = build.project(tenant.organization, "Batch")
        short = _submit(self.b, "short", 1)
        time.sleep(0.25)  # its simulated runtime
        tasks.tick()
        assert Workload.objects.get(pk=short.pk).status == "succeeded"
        _consume()  # the consumer runs between the steps too: each is counted once
        _quota(self.a, 2)
        _submit(self.a, "exp", 2, priority_class="low", runtime_estimate_s=LONG_S)
        _consume()
        _submit(self.a, "prod", 2, priority_class="production", runtime_estimate_s=LONG_S)
        _submit(self.a, "exp2", 2, priority_class="low")
        _consume()
        for i in range(2):  # one on each node: 1 + 3 GPUs stay free
            _submit(self.b, f"big{i}", 5, runtime_estimate_s=LONG_S)
        self.fragmented = _submit(self.b, "wide", 4, topology="single_node")


@pytest.fixture
def scenario(build: Builder, tenant: Tenant, in_process: None) -> Iterator[Scenario]:
    with override_settings(METRICS_TOKEN="", METRICS_ALLOWED_IPS=["127.0.0.1"]):
        yield Scenario(build, tenant)


def test_metrics_show_the_scenarios_outcomes_exactly(scenario: Scenario) -> None:
    # given the scenario, its events consumed
    _consume()
    a, b = str(scenario.a.pk), str(scenario.b.pk)

    # when Prometheus scrapes
    samples = _scrape()

    # then the waiting work by reason, the fleet and the totals are exactly the scenario's
    assert _series(samples, "neocloud_pending_workloads") == {
        _labels(cluster="fra1", queue=a, reason="quota"): 1,
        _labels(cluster="fra1", queue=a, reason="behind_higher_priority"): 1,
        _labels(cluster="fra1", queue=b, reason="fragmented"): 1,
    }
    assert _series(samples, "neocloud_cluster_gpus") == {
        _labels(cluster="fra1", gpu_model="h100", state="allocated"): 12,
        _labels(cluster="fra1", gpu_model="h100", state="free"): 4,
    }
    assert _series(samples, "neocloud_cluster_nodes") == {_labels(cluster="fra1", state="ready"): 2}
    assert _series(samples, "neocloud_queue_usage_gpus") == {
        _labels(queue=a, gpu_model="h100"): 2,
        _labels(queue=b, gpu_model="h100"): 10,
    }
    assert _series(samples, "neocloud_queue_nominal_quota_gpus") == {
        _labels(queue=a, gpu_model="h100"): 2
    }
    assert _series(samples, "neocloud_admitted_workloads_total") == {
        _labels(queue=b, priority_class=_class_of(scenario.fragmented)): 3,
        _labels(queue=a, priority_class="low"): 1,
        _labels(queue=a, priority_class="production"): 1,
    }
    assert _series(samples, "neocloud_finished_workloads_total") == {
        _labels(queue=b, outcome="succeeded"): 1
    }
    assert _series(samples, "neocloud_preempted_workloads_total") == {
        _labels(queue=a, reason="quota"): 1
    }
    counts = _series(samples, "neocloud_admission_wait_seconds_count")
    assert sum(counts.values()) == 5
    lags = _series(samples, "neocloud_consumer_lag_events")
    assert lags[_labels(consumer=f"projection:{counters.Counters.name}")] == 0
    head = samples["neocloud_event_log_head_position", frozenset()]
    assert head > 0


def _class_of(workload: Workload) -> str:
    return Workload.objects.get(pk=workload.pk).priority_class


def test_each_admission_is_observed_once_however_often_the_consumer_runs(
    scenario: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given the scenario's events consumed once, and a consumer that dies in its next batch
    # after writing (so its writes roll back with the checkpoint)
    _consume()
    before = _scrape()
    submitted = _submit(
        scenario.b, "late", 1, priority_class="production", runtime_estimate_s=LONG_S
    )
    assert Workload.objects.get(pk=submitted.pk).status == "running"
    fold_write = counters._Fold.write

    def write_then_die(fold: counters._Fold) -> None:
        fold_write(fold)
        raise RuntimeError("the consumer's process died")

    monkeypatch.setattr(counters._Fold, "write", write_then_die)
    with pytest.raises(RuntimeError):
        _consume()
    monkeypatch.undo()

    # when it runs again, twice
    _consume()
    assert _consume() == 0

    # then the new admission is counted once, and the others as before
    after = _scrape()
    observed = {
        labels: value - before.get(("neocloud_admission_wait_seconds_count", labels), 0)
        for labels, value in _series(after, "neocloud_admission_wait_seconds_count").items()
    }
    assert observed == {
        _labels(queue=str(scenario.b.pk), priority_class="standard"): 0,
        _labels(queue=str(scenario.b.pk), priority_class="production"): 1,
        _labels(queue=str(scenario.a.pk), priority_class="low"): 0,
        _labels(queue=str(scenario.a.pk), priority_class="production"): 0,
    }
    assert sum(h.count for h in MetricHistogram.objects.all()) == 6
    # and the buckets are cumulative up to +Inf, which holds every observation
    wait = _series(after, "neocloud_admission_wait_seconds_bucket")
    inf = sum(v for labels, v in wait.items() if ("le", "+Inf") in labels)
    assert inf == 6


def test_a_replay_folds_the_same_totals(scenario: Scenario) -> None:
    _consume()
    before = _series(_scrape(), "neocloud_admitted_workloads_total")

    projections_replay(names=[counters.Counters.name])

    assert _series(_scrape(), "neocloud_admitted_workloads_total") == before


def test_free_but_unschedulable_gpus_by_shape(tenant: Tenant, in_process: None) -> None:
    """4 nodes x 8 GPUs with 3 used on each: 20 free, 5 a node (tests/scheduler/
    test_fragmentation.py's fleet): no 8-GPU job fits although the free GPUs would hold two."""
    from tests.scheduler.test_fragmentation import _three_used_on_each

    fleet = _three_used_on_each(tenant)

    stranded = _series(_scrape(), "neocloud_free_unschedulable_gpus")

    def at(shape: str) -> float:
        return stranded[_labels(cluster=fleet.cluster.slug, gpu_model="h100", shape=shape)]

    assert [at(s) for s in ("1", "2", "4", "8", "2x8", "4x8")] == [0, 4, 4, 20, 20, 20]
