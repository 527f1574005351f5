"""``Ranked`` keeps its order in blocks: whatever the adds and removals, reading it gives
exactly the listed allocations in key order (equal keys in the order added), as one list kept
sorted entry by entry would."""

from __future__ import annotations

import bisect
import random

from hypothesis import given
from hypothesis import strategies as st

from scheduler.engine.model import Allocation
from scheduler.engine.ranked import Ranked
from tests.strategies import SETTINGS

# (add or remove, which of 12 allocations, its key): few keys, so that many are equal.
steps = st.lists(
    st.tuples(st.booleans(), st.integers(0, 11), st.integers(0, 3)), min_size=1, max_size=120
)


@SETTINGS
@given(st.integers(0, 6), steps)
def test_reading_gives_the_live_allocations_in_key_order(
    initially: int, operations: list[tuple[bool, int, int]]
) -> None:
    pool = [Allocation(f"w{i}", "q", "h100", ()) for i in range(12)]
    start = [((i % 3,), pool[i]) for i in range(initially)]
    ranked = Ranked(start)
    expected = sorted(start, key=lambda entry: entry[0])  # a list kept sorted, the old way
    for adding, which, key in operations:
        allocation = pool[which]
        listed = any(a is allocation for _, a in expected)
        if adding and not listed:
            ranked.add((key,), allocation)
            keys = [k for k, _ in expected]
            expected.insert(bisect.bisect_right(keys, (key,)), ((key,), allocation))
        elif not adding and listed:
            ranked.remove(next(k for k, a in expected if a is allocation), allocation)
            expected = [(k, a) for k, a in expected if a is not allocation]
        assert [a.workload for a in ranked] == [a.workload for _, a in expected]
        assert [(k, a.workload) for k, a in ranked.entries()] == [
            (k, a.workload) for k, a in expected
        ]


def test_an_allocation_removed_and_added_again_is_listed_once_at_its_new_key() -> None:
    first, second = Allocation("a", "q", None, ()), Allocation("b", "q", None, ())
    ranked = Ranked([((1,), first), ((2,), second), ((3,), Allocation("c", "q", None, ()))])

    ranked.remove((1,), first)
    ranked.add((5,), first)

    assert [a.workload for a in ranked] == ["b", "c", "a"]


def test_thousands_of_entries_across_blocks_keep_the_order_of_a_sorted_list() -> None:
    """Enough entries for blocks to split, with few distinct keys so that equal keys span
    blocks; checked against a list kept sorted entry by entry, after each thousand steps."""
    rng = random.Random(7)
    pool = [Allocation(f"w{i}", "q", "h100", ()) for i in range(4_000)]
    ranked = Ranked()
    expected: list[tuple[tuple[int], Allocation]] = []
    listed: set[int] = set()
    for step in range(12_000):
        which = rng.randrange(len(pool))
        # First only adds (blocks fill and split), then removals too (blocks shrink, empty).
        if step >= 4_000 and which in listed and rng.random() < 0.6:
            ranked.remove(next(k for k, a in expected if a is pool[which]), pool[which])
            expected = [(k, a) for k, a in expected if a is not pool[which]]
            listed.discard(which)
        elif which not in listed:
            key = (rng.randrange(5),)
            ranked.add(key, pool[which])
            at = bisect.bisect_right([k for k, _ in expected], key)
            expected.insert(at, (key, pool[which]))
            listed.add(which)
        if step % 1_000 == 999:
            assert [(k, a.workload) for k, a in ranked.entries()] == [
                (k, a.workload) for k, a in expected
            ]
    assert len(expected) > 2_000  # several blocks
    assert [(k, a.workload) for k, a in ranked.entries()] == [(k, a.workload) for k, a in expected]
