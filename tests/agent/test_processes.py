"""A run is known by its pid and its start time: a reused pid is not the run."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from agent import processes


def write_stat(proc: Path, pid: int, comm: str, state: str, start: int) -> None:
    fields = [state, *["0"] * 18, str(start), "0", "0"]  # fields 3..24; 22 is the start time
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "stat").write_text(f"{pid} ({comm}) {' '.join(fields)}\n")


def test_a_reused_pid_with_another_start_time_is_not_the_run(tmp_path: Path) -> None:
    write_stat(tmp_path, 4242, "python", "S", start=900)

    assert processes.is_running(4242, 900, proc=tmp_path)
    assert not processes.is_running(4242, 123, proc=tmp_path)  # same pid, another process
    assert not processes.is_running(4243, 900, proc=tmp_path)  # no such pid


def test_a_command_name_with_spaces_and_parentheses_is_read_right(tmp_path: Path) -> None:
    write_stat(tmp_path, 7, "a) (b c", "R", start=55)

    assert processes.proc_stat(7, proc=tmp_path) == processes.ProcStat(state="R", start_time=55)


def test_a_zombie_is_not_running(tmp_path: Path) -> None:
    write_stat(tmp_path, 9, "sh", "Z", start=10)

    assert not processes.is_running(9, 10, proc=tmp_path)


def test_a_real_process_is_known_by_its_start_time() -> None:
    child = subprocess.Popen(["sleep", "5"])
    try:
        started = processes.start_time(child.pid)
        assert started is not None
        assert processes.is_running(child.pid, started)
        assert not processes.is_running(child.pid, started + 1)
    finally:
        child.kill()
        child.wait()
    assert processes.start_time(child.pid) is None


def test_an_ended_child_not_yet_reaped_is_not_running() -> None:
    child = subprocess.Popen(["true"])
    started = processes.start_time(child.pid)
    assert started is not None
    time.sleep(0.3)  # ended, still a zombie: nobody waited

    assert not processes.is_running(child.pid, started)
    child.wait()
