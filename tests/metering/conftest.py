"""The scheduler's fixtures, for the metering tests that run real workloads."""

from tests.scheduler.conftest import in_process, tenant

__all__ = ["in_process", "tenant"]
