"""Scheduling: ``engine/`` is the pure-Python core; the Django side (queues, workloads,
reservations, the scheduling service) arrives with the order-to-running issue."""
