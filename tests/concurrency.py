"""Running calls at the same moment, each in a thread with its own database connection."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from django.db import connection


def at_once(calls: Sequence[Callable[[], object]]) -> list[BaseException]:
    """Start every call together (a barrier), wait for all; what they raised."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(calls))

    def work(call: Callable[[], object]) -> None:
        try:
            barrier.wait()
            call()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors
