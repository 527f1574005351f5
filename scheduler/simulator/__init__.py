"""The trace simulator: the scheduling engine, unchanged, in a discrete-event simulation
against baselines (``manage.py simulate``). Pure Python: no Django import.

- ``trace``: the Alibaba GPU trace v2023 as engine nodes and requests (bundled in ``data/``).
- ``placers``: the engine's placement and the baselines (random, first-fit, best-fit).
- ``fill``: the ATC'23 fragmentation protocol (pods arrive, never leave).
- ``workload`` and ``timed``: jobs with arrivals and runtimes, scheduled by ``schedule()``.
- ``report``: JSON, lines and optional plots.
"""
