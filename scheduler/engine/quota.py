"""Quotas per queue and GPU model, with borrowing inside a cohort (in the manner of Kueue).

A queue always may use its nominal quota. Beyond it, it borrows: at most ``borrowing_limit``
GPUs, and only what the other queues of its cohort leave unused of what they lend
(``lending_limit``, default all of their nominal). Queues absent from the policy are not
limited. On top of that, an organization with a quota of a model caps the sum of what the work
of all of its queues holds of it: its projects' quotas and borrowing never add up to more than
the organization's. Everything is counted in milli-GPU.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from scheduler.engine.model import WHOLE, Allocation, PendingReason, Policy, QueueConfig, ReasonCode


class QuotaLedger:
    def __init__(self, policy: Policy, allocations: Iterable[Allocation]) -> None:
        self.policy = policy
        self.used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        # By organization: what the work naming it holds, whichever queue it is in.
        self.organization_used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        # By reservation: what the work on it holds (of its model: admission sees to that).
        self.on_reservation: dict[str, int] = defaultdict(int)
        for allocation in allocations:
            self.add(allocation)

    def add(self, allocation: Allocation) -> None:
        model, milli = allocation.gpu_model or "", allocation.gpu_milli
        self.used[allocation.queue][model] += milli
        self.organization_used[allocation.organization][model] += milli
        if allocation.reservation is not None:
            self.on_reservation[allocation.reservation] += milli

    def remove(self, allocation: Allocation) -> None:
        model, milli = allocation.gpu_model or "", allocation.gpu_milli
        self.used[allocation.queue][model] -= milli
        self.organization_used[allocation.organization][model] -= milli
        if allocation.reservation is not None:
            self.on_reservation[allocation.reservation] -= milli

    def _cohort(self, queue: QueueConfig) -> list[QueueConfig]:
        if not queue.cohort:
            return []
        return [
            q
            for q in self.policy.queues.values()
            if q.cohort == queue.cohort and q.name != queue.name
        ]

    def borrowing(self, queue: str, model: str) -> int:
        """Milli-GPU the queue uses beyond its nominal quota."""
        config = self.policy.queues.get(queue)
        if config is None:
            return 0
        return max(0, self.used[queue][model] - config.nominal.get(model, 0) * WHOLE)

    def pool_free(self, queue: QueueConfig, model: str) -> int:
        """What the rest of the cohort lends and nobody has borrowed yet."""
        lent = borrowed = 0
        for other in self._cohort(queue):
            nominal = other.nominal.get(model, 0) * WHOLE
            lendable = nominal if other.lending_limit is None else other.lending_limit * WHOLE
            lent += min(lendable, max(0, nominal - self.used[other.name][model]))
            borrowed += self.borrowing(other.name, model)
        return lent - borrowed

    def check(
        self, queue: str, model: str, milli: int, organization: str = ""
    ) -> PendingReason | None:
        """None when ``milli`` more of ``model`` fits the queue's quota and its
        ``organization``'s, else the reason."""
        reason = self._check_queue(queue, model, milli)
        if reason is None and self.policy.organizations:
            return self._check_organization(organization, model, milli)
        return reason

    def _check_queue(self, queue: str, model: str, milli: int) -> PendingReason | None:
        config = self.policy.queues.get(queue)
        if config is None:
            return None
        nominal = config.nominal.get(model, 0) * WHOLE
        used = self.used[queue][model]
        beyond = used + milli - nominal
        if beyond <= 0:
            return None
        limit = None if config.borrowing_limit is None else config.borrowing_limit * WHOLE
        pool = self.pool_free(config, model)
        if (limit is None or beyond <= limit) and beyond <= pool:
            return None
        gpus = f"{used / WHOLE:g} of {nominal / WHOLE:g} {model}"
        return PendingReason(
            ReasonCode.QUOTA,
            f"queue {queue} uses {gpus}; needs {milli / WHOLE:g} more and can borrow"
            f" {max(0, min(pool, limit if limit is not None else pool)) / WHOLE:g}",
            {
                "queue": queue,
                "gpu_model": model,
                "used": used / WHOLE,
                "nominal": nominal / WHOLE,
                "needed": milli / WHOLE,
                "borrowable": max(0, pool) / WHOLE,
            },
        )

    def _check_organization(
        self, organization: str, model: str, milli: int
    ) -> PendingReason | None:
        quotas = self.policy.organizations.get(organization)
        if quotas is None or model not in quotas:
            return None
        quota = quotas[model] * WHOLE
        used = self.organization_used[organization][model]
        if used + milli <= quota:
            return None
        return PendingReason(
            ReasonCode.QUOTA,
            f"organization {organization} uses {used / WHOLE:g} of {quota / WHOLE:g} {model}"
            f" over all of its projects; needs {milli / WHOLE:g} more",
            {
                "organization": organization,
                "gpu_model": model,
                "used": used / WHOLE,
                "quota": quota / WHOLE,
                "needed": milli / WHOLE,
            },
        )

    def within_nominal(self, queue: str, model: str, milli: int) -> bool:
        config = self.policy.queues.get(queue)
        if config is None:
            return False
        return self.used[queue][model] + milli <= config.nominal.get(model, 0) * WHOLE
