"""Execution: a run's assignments on its nodes, what their agents report, and their output."""
