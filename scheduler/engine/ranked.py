"""Running work kept in an order of its own: cheapest to preempt first (``preemption.ByCost``),
soonest to end first (``backfill.Ending``).

A forecast grants and gives back thousands of allocations on orders of thousands, and new work
lands near the front of the cost order (it started last): in one sorted list, each insertion
or removal would shift most of it. So the order is kept in blocks of at most ``2 * _BLOCK``
entries, found by their last keys: an insertion or removal shifts one block."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from operator import itemgetter
from typing import Any, Final

from scheduler.engine.model import Allocation

Entry = tuple[tuple[Any, ...], Allocation]
by_key: Final = itemgetter(0)  # an entry's key
_BLOCK: Final = 512  # a block splits in two above twice this


class Ranked:
    """Allocations sorted by their keys, equal keys in the order they were added."""

    def __init__(self, entries: Iterable[Entry] = ()) -> None:
        ordered = sorted(entries, key=by_key)  # stable: as if added one by one
        self._keys: list[list[tuple[Any, ...]]] = []  # by block, none empty
        self._allocations: list[list[Allocation]] = []
        self._lasts: list[tuple[Any, ...]] = []  # each block's last key
        for start in range(0, len(ordered), _BLOCK):
            block = ordered[start : start + _BLOCK]
            self._keys.append([key for key, _ in block])
            self._allocations.append([a for _, a in block])
            self._lasts.append(block[-1][0])

    def add(self, key: tuple[Any, ...], allocation: Allocation) -> None:
        if not self._keys:
            self._keys.append([key])
            self._allocations.append([allocation])
            self._lasts.append(key)
            return
        # The first block whose last key is above ``key``: after every equal key.
        block = min(bisect.bisect_right(self._lasts, key), len(self._keys) - 1)
        keys, allocations = self._keys[block], self._allocations[block]
        at = bisect.bisect_right(keys, key)
        keys.insert(at, key)
        allocations.insert(at, allocation)
        self._lasts[block] = keys[-1]
        if len(keys) > 2 * _BLOCK:
            self._keys[block : block + 1] = [keys[:_BLOCK], keys[_BLOCK:]]
            self._allocations[block : block + 1] = [allocations[:_BLOCK], allocations[_BLOCK:]]
            self._lasts[block : block + 1] = [keys[_BLOCK - 1], keys[-1]]

    def remove(self, key: tuple[Any, ...], allocation: Allocation) -> None:
        """Remove ``allocation``, listed under ``key``."""
        block = bisect.bisect_left(self._lasts, key)  # the first that may hold ``key``
        at = bisect.bisect_left(self._keys[block], key)
        while True:  # equal keys may run on into the next blocks
            allocations = self._allocations[block]
            while at < len(allocations) and allocations[at] is not allocation:
                at += 1
            if at < len(allocations):
                break
            block, at = block + 1, 0
        keys = self._keys[block]
        del keys[at]
        del allocations[at]
        if keys:
            self._lasts[block] = keys[-1]
        else:
            del self._keys[block], self._allocations[block], self._lasts[block]

    def __iter__(self) -> Iterator[Allocation]:
        for allocations in self._allocations:
            yield from allocations

    def entries(self) -> Iterator[Entry]:
        for keys, allocations in zip(self._keys, self._allocations, strict=True):
            yield from zip(keys, allocations, strict=True)
