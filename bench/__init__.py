"""The benchmark suites of ``manage.py bench``, one module each, outside the apps they measure.

A suite measures and never asserts: it returns one dict of figures, each beside the baseline it
is compared with in the same run, and the process's peak memory (``registry``).
"""

SUITE_MODULES = (
    "api",
    "e2e",
    "eventstore",
    "estimates",
    "estimates_api",
    "execution",
    "gateway",  # web ports through Caddy (issue 32)
    "interactive",  # issue 32
    "invoicing",
    "kueue_engine",
    "longpoll",
    "metering",
    "scheduler",
)
