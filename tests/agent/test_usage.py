"""The agent's measure of a volume's usage (agent/usage.py): du's disk blocks of what the
directory holds, a hard-linked file once, no symlink followed, bounded in entries."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent import usage


def blocks(*paths: Path) -> int:
    return sum(os.lstat(p).st_blocks * usage.BLOCK for p in paths)


def test_a_volume_measures_its_files_and_directories_once_each(tmp_path: Path) -> None:
    volume = tmp_path / "volume"
    (volume / "deep" / "er").mkdir(parents=True)
    (volume / "a").write_bytes(os.urandom(200_000))
    (volume / "deep" / "er" / "b").write_bytes(os.urandom(50_000))
    os.link(volume / "a", volume / "deep" / "a-again")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big").write_bytes(os.urandom(500_000))
    (volume / "link").symlink_to(outside)

    used = usage.measure(str(volume))

    expected = blocks(
        volume, volume / "deep", volume / "deep" / "er", volume / "a",
        volume / "deep" / "er" / "b", volume / "link",
    )  # fmt: skip
    assert used == expected
    assert 250_000 <= used < 500_000  # the linked file once, the symlink's target not at all


def test_a_walk_past_its_bound_is_not_a_measure(tmp_path: Path) -> None:
    for index in range(5):
        (tmp_path / str(index)).write_text("x")

    with pytest.raises(usage.TooLarge):
        usage.measure(str(tmp_path), max_entries=4)


def test_a_pass_reports_the_volumes_mounted_now_and_forgets_the_others(
    tmp_path: Path,
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    (one / "data").write_bytes(os.urandom(100_000))
    measures = usage.VolumeUsage()

    measures.measure_pass([("v1", str(one)), ("v2", str(two)), ("v1", str(one))])
    first = {m["id"]: m["used_bytes"] for m in measures.report()}
    measures.measure_pass([("v2", str(two)), ("v3", str(tmp_path / "missing"))])

    assert first == {"v1": usage.measure(str(one)), "v2": usage.measure(str(two))}
    assert measures.report() == [{"id": "v2", "used_bytes": usage.measure(str(two))}]
