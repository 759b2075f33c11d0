"""A seccomp filter for sandboxed commands: io_uring and the kernel keyring are refused.

Defence in depth beside the namespaces and cgroups: io_uring has been the way into most
recent kernel privilege escalations, and the keyring is shared by every process of a uid
(every session runs as the same sandbox uid). Both answer ``EPERM``; no tool, test runner
or interpreter in a session needs them. Syscalls of another ABI than the host's (32-bit
``int 0x80`` on x86_64, x32) are refused as a whole, so the numbers below cannot be
reached under other names.

The program is classic BPF, as ``bwrap --seccomp FD`` loads it (an array of ``struct
sock_filter``); written here because it is twelve instructions and the libseccomp
binding is not on PyPI. Left out: a default-deny allow-list (it would have to follow
every interpreter and test runner a task may use), and architectures other than x86_64
and aarch64 (there the sandbox runs without the filter and says so).
"""

from __future__ import annotations

import os
import platform
import struct
from pathlib import Path

# (audit arch, io_uring_setup, io_uring_enter, io_uring_register, add_key, request_key, keyctl)
_ARCHES = {
    "x86_64": (0xC000003E, 425, 426, 427, 248, 249, 250),
    "aarch64": (0xC00000B7, 425, 426, 427, 217, 218, 219),
}
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_RET_ALLOW = 0x7FFF0000
_RET_EPERM = 0x00050000 | 1
_X32_BIT = 0x40000000
_OFFSET_NR, _OFFSET_ARCH = 0, 4  # struct seccomp_data


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes | None:
    """The filter for ``machine`` (default: this one's), or None where none is known."""
    arch = _ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    audit_arch, *denied = arch
    n = len(denied)
    # 0: ld arch; 1: jeq native (else deny); 2: ld nr; 3: nr >= x32 bit -> deny;
    # 4..4+n-1: jeq denied -> deny; 4+n: allow; 5+n: deny
    deny_at = 5 + n
    out = [
        _insn(_LD_W_ABS, 0, 0, _OFFSET_ARCH),
        _insn(_JEQ_K, 0, deny_at - 2, audit_arch),
        _insn(_LD_W_ABS, 0, 0, _OFFSET_NR),
        _insn(_JGE_K, deny_at - 4, 0, _X32_BIT),
    ]
    for i, nr in enumerate(denied):
        here = 4 + i
        out.append(_insn(_JEQ_K, deny_at - here - 1, 0, nr))
    out.append(_insn(_RET_K, 0, 0, _RET_ALLOW))
    out.append(_insn(_RET_K, 0, 0, _RET_EPERM))
    return b"".join(out)


def write_program(path: Path) -> Path | None:
    """Write this machine's filter to ``path`` (readable by all: the launcher opens it as
    root and hands bwrap the descriptor); None, and nothing written, where none is known."""
    data = program()
    if data is None:
        return None
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_bytes(data)
    os.chmod(tmp, 0o644)
    tmp.replace(path)
    return path
