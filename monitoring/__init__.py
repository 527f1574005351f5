"""Monitoring: ``/metrics`` for Prometheus (docs/operations/monitoring.md).

An entry point like the console: it reads every app, no app imports it. The apps tell it what
happens on their paths through hooks it answers in ``MonitoringConfig.ready``.
"""
