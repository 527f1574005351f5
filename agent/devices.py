"""Keep a run off other runs' GPUs by device number, since CUDA_VISIBLE_DEVICES is only advisory.

Any process can open every /dev/nvidiaN it can see; only the kernel's per-cgroup device check
stops it. What holds where:

- cgroup v1 (a "devices" hierarchy): deny lines written to the cgroup's devices.deny;
- cgroup v2: there is no devices file; a BPF_PROG_TYPE_CGROUP_DEVICE program attached to the
  cgroup decides each open and mknod (what systemd and runc use too). It is loaded with bpf(2)
  through ctypes and attached with BPF_F_ALLOW_MULTI so that more programs can stack on it;
- neither (no devices hierarchy, bpf refused): no isolation; the caller has to say so.

Both only deny what they are given; the host's own policy still applies on top (in v2, if its
program was attached with BPF_F_ALLOW_MULTI, as systemd's is). The check happens at open: deny
before a process joins, as an fd it already holds stays usable.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
import stat
import struct
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Device:
    """A character device file and the numbers the kernel checks (the path is only for people)."""

    path: str
    major: int
    minor: int


def char_device(path: str) -> Device | None:
    """The device at ``path``, or None when it is missing or not a character device."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISCHR(info.st_mode):
        return None
    return Device(path, os.major(info.st_rdev), os.minor(info.st_rdev))


def deny_v1(cgroup: Path, devices: list[Device]) -> None:
    """Deny read, write and mknod of each device to a cgroup of the v1 devices hierarchy."""
    for device in devices:
        # One rule per write: the kernel parses a single rule from each write(2).
        (cgroup / "devices.deny").write_text(f"c {device.major}:{device.minor} rwm")


# bpf(2) constants, from linux/bpf.h.
_SYSCALL = {"x86_64": 321, "aarch64": 280}  # both little-endian, which _insn assumes
_PROG_LOAD, _PROG_ATTACH = 5, 8
_PROG_TYPE_CGROUP_DEVICE = 15
_ATTACH_CGROUP_DEVICE = 6
_F_ALLOW_MULTI = 2
_DEV_CHAR = 2  # BPF_DEVCG_DEV_CHAR, in the low 16 bits of ctx->access_type

# The five opcodes the program uses.
_LDX_W = 0x61  # BPF_LDX | BPF_MEM | BPF_W: dst = *(u32 *)(src + off)
_AND_K = 0x54  # BPF_ALU | BPF_AND | BPF_K: dst &= imm
_JNE_K = 0x55  # BPF_JMP | BPF_JNE | BPF_K: if dst != imm, skip off instructions
_MOV_K = 0xB7  # BPF_ALU64 | BPF_MOV | BPF_K: dst = imm
_EXIT = 0x95  # BPF_JMP | BPF_EXIT: return r0

_LOG_SIZE = 1 << 16


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    """struct bpf_insn; dst_reg is the low nibble of the second byte on little-endian."""
    return struct.pack("<BBhi", code, src << 4 | dst, off, imm)


def program(devices: list[Device]) -> bytes:
    """The instructions: 0 (deny) for a character device in ``devices``, 1 (allow) otherwise.

    r1 points at struct bpf_cgroup_dev_ctx {u32 access_type, major, minor}.
    """
    deny = [
        insn
        for device in devices
        for insn in (
            _insn(_JNE_K, dst=4, off=3, imm=device.major),  # not this major: next device
            _insn(_JNE_K, dst=5, off=2, imm=device.minor),  # not this minor: next device
            _insn(_MOV_K, dst=0, imm=0),
            _insn(_EXIT),
        )
    ]
    return b"".join(
        [
            _insn(_LDX_W, dst=2, src=1, off=0),  # r2 = access_type
            _insn(_AND_K, dst=2, imm=0xFFFF),  # r2 = device type
            _insn(_LDX_W, dst=4, src=1, off=4),  # r4 = major
            _insn(_LDX_W, dst=5, src=1, off=8),  # r5 = minor
            _insn(_JNE_K, dst=2, off=len(deny), imm=_DEV_CHAR),  # a block device: allow
            *deny,
            _insn(_MOV_K, dst=0, imm=1),
            _insn(_EXIT),
        ]
    )


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _bpf(command: int, attr: bytes) -> int:
    """bpf(command, attr); the fd or 0 it returns, OSError with errno on failure."""
    number = _SYSCALL.get(platform.machine())
    if number is None:
        raise OSError(f"bpf(2): no syscall number known for {platform.machine()}")
    buffer = ctypes.create_string_buffer(attr, len(attr))
    result = int(
        _libc.syscall(
            ctypes.c_long(number), ctypes.c_long(command), buffer, ctypes.c_uint(len(attr))
        )
    )
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


def _prog_load(code: bytes, log: ctypes.Array[ctypes.c_char] | None) -> int:
    instructions = ctypes.create_string_buffer(code, len(code))
    license = ctypes.create_string_buffer(b"GPL")
    attr = struct.pack(
        "=IIQQIIQ",
        _PROG_TYPE_CGROUP_DEVICE,
        len(code) // 8,
        ctypes.addressof(instructions),
        ctypes.addressof(license),
        1 if log is not None else 0,  # log_level
        len(log) if log is not None else 0,
        ctypes.addressof(log) if log is not None else 0,
    )
    return _bpf(_PROG_LOAD, attr)


def _load(devices: list[Device]) -> int:
    """The fd of a loaded deny program; OSError with the verifier's words if it is refused."""
    code = program(devices)
    try:
        return _prog_load(code, None)
    except OSError as error:
        refused = error
    # Loaded again only to read why: a log on every load fails with ENOSPC once it outgrows
    # its buffer (kernel 6.4+), which a long device list could do.
    log = ctypes.create_string_buffer(_LOG_SIZE)
    with contextlib.suppress(OSError):
        os.close(_prog_load(code, log))
    # The verifier traces every instruction; its last lines say what it refused.
    why = "; ".join(log.value.decode(errors="replace").splitlines()[-2:]) or "no verifier log"
    raise OSError(
        refused.errno,
        f"bpf(BPF_PROG_LOAD) of a cgroup device program: {refused.strerror} ({why})",
    )


def deny_v2(cgroup: Path, devices: list[Device]) -> None:
    """Attach a program denying ``devices`` to a cgroup v2 directory, on top of any there.

    The attachment keeps the program alive until the cgroup is removed; it cannot be taken
    back short of that. Each call attaches one more program (the kernel allows 64 a cgroup).
    An ancestor's program still applies if it was attached with BPF_F_ALLOW_MULTI (systemd's
    and runc's are); one attached with BPF_F_ALLOW_OVERRIDE is replaced by ours below it, and
    one attached with neither flag makes this fail with EPERM.
    """
    fd = _load(devices)
    try:
        target = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
        try:
            attr = struct.pack("=IIII", target, fd, _ATTACH_CGROUP_DEVICE, _F_ALLOW_MULTI)
            _bpf(_PROG_ATTACH, attr)
        except OSError as error:
            why = f"bpf(BPF_PROG_ATTACH) of a device program to {cgroup}: {error.strerror}"
            raise OSError(error.errno, why) from None
        finally:
            os.close(target)
    finally:
        os.close(fd)


@functools.cache
def v2_supported() -> bool:
    """Whether this kernel loads device programs for us (CAP_BPF or CAP_SYS_ADMIN, CGROUP_BPF).

    Tried once. Attaching can still be refused for a given cgroup; deny_v2 raises then.
    """
    try:
        os.close(_load([]))
    except OSError:
        return False
    return True
