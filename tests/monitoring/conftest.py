"""The scheduler's fixtures: a tenant and tasks in process; a sample of /metrics."""

from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.scheduler.conftest import in_process, tenant

__all__ = ["in_process", "metric_value", "tenant"]


def metric_value(name: str, **labels: str) -> float:
    """A sample of this process's /metrics (0 when absent)."""
    body = Client().get("/metrics").content.decode()
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0
