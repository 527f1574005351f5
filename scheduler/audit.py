"""Checks of the log's scheduling invariants, for tests and the end-to-end benchmark.

Read from the events alone, in position order: whether any GPU was ever held beyond its
capacity (double-booked), the most each project and each organization ever held of a GPU model
at once (to hold against their quotas), whether any workload was granted GPUs after it ended
(cancelled, or released with a final status), and whether any workload was lost (its row
missing, or holding GPUs the log says it does not hold, or the reverse).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from events import store
from scheduler import events as ev
from scheduler.models import FINAL_STATUSES, HOLDING_STATUSES, Allocation, Workload

TYPES = (
    ev.WorkloadSubmitted.event_type,
    ev.WorkloadCancelled.event_type,
    ev.AllocationGranted.event_type,
    ev.WorkloadPreempted.event_type,
    ev.AllocationReleased.event_type,
)
WHOLE = 1000


@dataclass
class Audit:
    workloads: int = 0
    grants: int = 0
    double_booked_gpus: set[tuple[str, int]] = field(default_factory=set)
    # The most milli-GPU each (project, GPU model) ever held at once.
    peak_usage: dict[tuple[str, str], int] = field(default_factory=dict)
    # The same per (organization, GPU model): over all of its projects.
    organization_peak_usage: dict[tuple[str, str], int] = field(default_factory=dict)
    # Workloads granted GPUs after an event that ended them.
    granted_after_end: set[str] = field(default_factory=set)
    lost_workloads: set[str] = field(default_factory=set)

    def as_dict(self) -> dict[str, int]:
        return {
            "workloads": self.workloads,
            "grants": self.grants,
            "double_booked_gpus": len(self.double_booked_gpus),
            "granted_after_end": len(self.granted_after_end),
            "lost_workloads": len(self.lost_workloads),
        }


def audit_log() -> Audit:
    audit = Audit()
    held: dict[tuple[str, int], int] = defaultdict(int)
    live: dict[str, list[tuple[tuple[str, int], int]]] = {}  # allocation -> its GPU shares
    usage: dict[tuple[str, str], int] = defaultdict(int)
    organization_usage: dict[tuple[str, str], int] = defaultdict(int)
    # allocation -> (project, model), (organization, model)
    owner: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {}
    holder_of: dict[str, str] = {}  # workload -> allocation it holds, by the log
    submitted: set[str] = set()
    ended: set[str] = set()
    for batch in store.iter_batches(types=TYPES):
        for event in batch:
            data = event.data
            if event.type == ev.WorkloadSubmitted.event_type:
                submitted.add(str(data["workload_id"]))
            elif event.type == ev.WorkloadCancelled.event_type:
                ended.add(event.stream_id)
            elif event.type == ev.AllocationGranted.event_type:
                audit.grants += 1
                if str(data["workload_id"]) in ended:
                    audit.granted_after_end.add(str(data["workload_id"]))
                shares = [
                    ((str(p["node_id"]), gpu), p["gpu_milli"])
                    for p in data["placements"]
                    for gpu in p["gpus"]
                ]
                for gpu, milli in shares:
                    held[gpu] += milli
                    if held[gpu] > WHOLE:
                        audit.double_booked_gpus.add(gpu)
                live[str(data["allocation_id"])] = shares
                milli_total = sum(milli for _, milli in shares)
                key = (str(data["project_id"]), data["gpu_model"] or "")
                usage[key] += milli_total
                audit.peak_usage[key] = max(audit.peak_usage.get(key, 0), usage[key])
                org_key = (str(data["organization_id"]), data["gpu_model"] or "")
                organization_usage[org_key] += milli_total
                audit.organization_peak_usage[org_key] = max(
                    audit.organization_peak_usage.get(org_key, 0), organization_usage[org_key]
                )
                owner[str(data["allocation_id"])] = (key, org_key)
                holder_of[str(data["workload_id"])] = str(data["allocation_id"])
            else:
                workload = str(data.get("workload_id") or event.stream_id)
                if data.get("status") in FINAL_STATUSES:
                    ended.add(workload)
                shares_released = live.pop(str(data["allocation_id"]), None)
                if shares_released is None:
                    continue  # released before: the first release wins
                for gpu, milli in shares_released:
                    held[gpu] -= milli
                key, org_key = owner[str(data["allocation_id"])]
                usage[key] -= sum(m for _, m in shares_released)
                organization_usage[org_key] -= sum(m for _, m in shares_released)
                if holder_of.get(workload) == str(data["allocation_id"]):
                    del holder_of[workload]
    audit.workloads = len(submitted)
    rows = {str(pk): status for pk, status in Workload.objects.values_list("id", "status")}
    audit.lost_workloads |= submitted - set(rows)
    for workload, status in rows.items():
        if (status in HOLDING_STATUSES) != (workload in holder_of):
            audit.lost_workloads.add(workload)
    live_rows = {
        str(a)
        for a in Allocation.objects.filter(released_at__isnull=True).values_list("id", flat=True)
    }
    for allocation in set(live) ^ live_rows:
        audit.lost_workloads.add(f"allocation:{allocation}")
    return audit
