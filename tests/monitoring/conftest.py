"""The scheduler's fixtures: a tenant and tasks in process."""

from tests.scheduler.conftest import in_process, tenant

__all__ = ["in_process", "tenant"]
