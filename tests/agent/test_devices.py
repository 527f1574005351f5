"""Device denial on the real kernel: v1 devices.deny and a v2 BPF device program.

The "GPUs" are character devices made with mknod that clone harmless ones (major 1: null,
zero, full, random), so opening them does nothing; the kernel checks only their numbers.
"""

from __future__ import annotations

import os
import stat
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent import devices
from agent.devices import Device

# In the child: join the cgroup (if given), then try to open each path; one word per path.
OPEN_EACH = """
import errno, os, sys
if sys.argv[1]:
    with open(sys.argv[1], "w") as procs:
        procs.write(str(os.getpid()))
for path in sys.argv[2:]:
    try:
        os.close(os.open(path, os.O_RDONLY))
        print("ok")
    except OSError as error:
        print(errno.errorcode[error.errno])
"""


def opens(gpus: list[Device], cgroup: Path | None = None) -> list[str]:
    procs = str(cgroup / "cgroup.procs") if cgroup else ""
    paths = [gpu.path for gpu in gpus]
    child = subprocess.run(
        [sys.executable, "-c", OPEN_EACH, procs, *paths],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    return child.stdout.split()


def mount(fstype: str, option: str | None = None) -> Path | None:
    for line in Path("/proc/mounts").read_text().splitlines():
        _, where, kind, options, *_ = line.split()
        if kind == fstype and (option is None or option in options.split(",")):
            return Path(where)
    return None


@pytest.fixture
def gpus(tmp_path: Path) -> list[Device]:
    if os.geteuid() != 0:
        pytest.skip("mknod and cgroup writes need root")
    made = []
    for name, minor in [("null", 3), ("zero", 5), ("full", 7), ("random", 8)]:
        path = tmp_path / f"nvidia-{name}"
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
        device = devices.char_device(str(path))
        assert device == Device(str(path), 1, minor)
        made.append(device)
    return made


def v2_parent() -> Path:
    parent = mount("cgroup2")
    if parent is None:
        pytest.skip("no cgroup2 hierarchy in /proc/mounts")
    if not devices.v2_supported():
        pytest.skip("bpf(BPF_PROG_LOAD) of a cgroup device program refused by this kernel")
    return parent


@pytest.fixture
def make_cgroup(gpus: list[Device]) -> Iterator[Callable[[Path], Path]]:
    """mkdir a test cgroup under a parent; all removed (children first) once the test is done."""
    made: list[Path] = []

    def make(parent: Path) -> Path:
        path = parent / f"neocloud-test-devices-{os.getpid()}-{len(made)}"
        path.mkdir()
        made.append(path)
        return path

    yield make
    for path in reversed(made):
        path.rmdir()  # EBUSY here means a child process outlived its test


@pytest.fixture(params=["v1", "v2"])
def isolation(
    request: pytest.FixtureRequest, make_cgroup: Callable[[Path], Path]
) -> tuple[Path, Callable[[Path, list[Device]], None]]:
    if request.param == "v1":
        parent = mount("cgroup", "devices")
        if parent is None:
            pytest.skip("no cgroup v1 devices hierarchy in /proc/mounts")
        return make_cgroup(parent), devices.deny_v1
    return make_cgroup(v2_parent()), devices.deny_v2


def test_a_process_in_the_cgroup_opens_only_the_devices_not_denied(
    gpus: list[Device], isolation: tuple[Path, Callable[[Path, list[Device]], None]]
) -> None:
    cgroup, deny = isolation

    deny(cgroup, [gpus[1], gpus[3]])

    assert opens(gpus, cgroup) == ["ok", "EPERM", "ok", "EPERM"]
    assert opens(gpus) == ["ok", "ok", "ok", "ok"]  # outside the cgroup nothing changed


def test_v2_programs_stack_a_parents_deny_still_applies_in_its_child(
    gpus: list[Device], make_cgroup: Callable[[Path], Path]
) -> None:
    parent = make_cgroup(v2_parent())
    child = make_cgroup(parent)

    devices.deny_v2(parent, [gpus[0]])
    devices.deny_v2(child, [gpus[2]])
    devices.deny_v2(child, [gpus[3]])

    assert opens(gpus, child) == ["EPERM", "ok", "EPERM", "EPERM"]
    assert opens(gpus, parent) == ["EPERM", "ok", "ok", "ok"]


def test_attaching_to_a_directory_that_is_not_a_v2_cgroup_says_where(
    gpus: list[Device], tmp_path: Path
) -> None:
    v2_parent()

    with pytest.raises(OSError, match=rf"BPF_PROG_ATTACH\) of a device program to {tmp_path}"):
        devices.deny_v2(tmp_path, [gpus[0]])


def test_char_device_is_none_for_a_missing_path_or_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")

    assert devices.char_device(str(tmp_path / "missing")) is None
    assert devices.char_device(str(tmp_path / "file")) is None


def verdict(code: bytes, access_type: int, major: int, minor: int) -> int:
    """Run the program on one access: the five opcodes it uses, r1 pointing at the context."""
    context = struct.pack("<III", access_type, major, minor)
    registers = [0] * 11
    pc = 0
    while True:
        opcode, regs, offset, imm = struct.unpack_from("<BBhi", code, pc * 8)
        dst, src = regs & 0xF, regs >> 4
        pc += 1
        if opcode == 0x61 and src == 1:
            registers[dst] = struct.unpack_from("<I", context, offset)[0]
        elif opcode == 0x54:
            registers[dst] &= imm
        elif opcode == 0xB7:
            registers[dst] = imm
        elif opcode == 0x55:
            pc += offset if registers[dst] != imm else 0
        elif opcode == 0x95:
            return registers[0]
        else:
            raise AssertionError(f"unexpected instruction {opcode:#x} at {pc - 1}")


CHAR, BLOCK, READ_WRITE = 2, 1, (2 | 4) << 16
GPUS = [Device(f"/dev/nvidia{n}", 195, n) for n in (0, 1, 5)]


@pytest.mark.parametrize(
    ("access_type", "major", "minor", "allowed"),
    [
        pytest.param(CHAR, 195, 0, 0, id="first-listed"),
        pytest.param(READ_WRITE | CHAR, 195, 5, 0, id="last-listed-with-access-bits"),
        pytest.param(CHAR, 195, 2, 1, id="unlisted-minor"),
        pytest.param(CHAR, 194, 1, 1, id="same-minor-other-major"),
        pytest.param(BLOCK, 195, 0, 1, id="block-device-with-a-listed-number"),
    ],
)
def test_the_program_denies_exactly_the_listed_character_devices(
    access_type: int, major: int, minor: int, allowed: int
) -> None:
    assert verdict(devices.program(GPUS), access_type, major, minor) == allowed
    assert verdict(devices.program([]), access_type, major, minor) == 1
