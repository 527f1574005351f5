"""Scheduling reads: policy (priority classes, quotas, queues), capacity, workloads' state
beyond their rows, reservations. None of them locks or writes."""

from scheduler.selectors.capacity import cluster_allocation, cluster_allocations, gpus_held
from scheduler.selectors.estimates import estimate_message, workload_estimates
from scheduler.selectors.leases import ClusterLease, cluster_leases
from scheduler.selectors.policy import (
    BUILTIN_PRIORITY_CLASSES,
    default_cohort,
    priority_of,
    queues_of,
)
from scheduler.selectors.reservations import (
    reservations_for_billing,
    reservations_overlapping,
    workloads_on_reservations,
)
from scheduler.selectors.utilisation import (
    Utilisation,
    placements_utilisation,
    workloads_utilisation,
)
from scheduler.selectors.workloads import (
    WorkloadState,
    ssh_commands,
    workload_events,
    workload_states,
)

__all__ = [
    "BUILTIN_PRIORITY_CLASSES",
    "ClusterLease",
    "Utilisation",
    "WorkloadState",
    "cluster_allocation",
    "cluster_allocations",
    "cluster_leases",
    "default_cohort",
    "estimate_message",
    "gpus_held",
    "placements_utilisation",
    "priority_of",
    "queues_of",
    "reservations_for_billing",
    "reservations_overlapping",
    "ssh_commands",
    "workload_estimates",
    "workload_events",
    "workload_states",
    "workloads_on_reservations",
    "workloads_utilisation",
]
