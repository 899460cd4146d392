"""A seccomp deny-list for the one process that keeps a capability: an ncu-profiled job on a host whose
NVIDIA driver restricts GPU performance counters to admins (RmProfilingAdminOnly=1).

Why: ncu's injection library reads the counters from inside the profiled process, so that process must
hold CAP_SYS_ADMIN there (tool_confine.py). Landlock still confines its files, signals and sockets, and
no_new_privs stays set, but CAP_SYS_ADMIN also unlocks system calls that reach outside the process:
bpf (tracing programs can read any process's memory), perf_event_open, fanotify (watch every file
event), keyctl, namespace joins and mounts. This filter makes those fail with EPERM. Unprivileged
(no_new_privs is set first), pure ctypes, x86-64 and aarch64; elsewhere it reports that it did nothing.
"""

from __future__ import annotations

import ctypes
import errno
import platform
from collections.abc import Sequence

SYS_SECCOMP = {"x86_64": 317, "aarch64": 277}
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_TSYNC = 1
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_KILL_PROCESS = 0x80000000
# classic BPF opcodes
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_RET_K = 0x06
ARCH_OFFSET, NR_OFFSET = 4, 0

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
SYSCALLS = {
    "x86_64": {"bpf": 321, "perf_event_open": 298, "fanotify_init": 300, "keyctl": 250, "add_key": 248,
               "request_key": 249, "setns": 308, "unshare": 272, "mount": 165, "umount2": 166, "pivot_root": 155,
               "move_mount": 429, "open_tree": 428, "fsopen": 430, "fsmount": 432, "fsconfig": 431,
               "name_to_handle_at": 303, "open_by_handle_at": 304, "kexec_load": 246, "init_module": 175,
               "finit_module": 313, "delete_module": 176, "swapon": 167, "swapoff": 168, "reboot": 169,
               "quotactl": 179, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
               "userfaultfd": 323, "iopl": 172, "ioperm": 173, "acct": 163, "sethostname": 170,
               "setdomainname": 171, "settimeofday": 164, "clock_settime": 227},
    "aarch64": {"bpf": 280, "perf_event_open": 241, "fanotify_init": 262, "keyctl": 219, "add_key": 217,
                "request_key": 218, "setns": 268, "unshare": 97, "mount": 40, "umount2": 39, "pivot_root": 41,
                "move_mount": 429, "open_tree": 428, "fsopen": 430, "fsmount": 432, "fsconfig": 431,
                "name_to_handle_at": 264, "open_by_handle_at": 265, "kexec_load": 104, "init_module": 105,
                "finit_module": 273, "delete_module": 106, "swapon": 224, "swapoff": 225, "reboot": 142,
                "quotactl": 60, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
                "userfaultfd": 282, "acct": 89, "sethostname": 161, "setdomainname": 162,
                "settimeofday": 170, "clock_settime": 112},
}
ADMIN_DENY = tuple(SYSCALLS["x86_64"])
"""What a process that keeps CAP_SYS_ADMIN may not call (each name: why in the module docstring)."""


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


def program(names: Sequence[str], machine: str | None = None) -> list[tuple[int, int, int, int]]:
    """The BPF program (code, jt, jf, k): another architecture is killed, a named call fails with EPERM."""
    machine = machine or platform.machine()
    table = SYSCALLS[machine]
    numbers = sorted({table[n] for n in names if n in table})
    prog = [(BPF_LD_W_ABS, 0, 0, ARCH_OFFSET), (BPF_JEQ_K, 1, 0, AUDIT_ARCH[machine]),
            (BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS), (BPF_LD_W_ABS, 0, 0, NR_OFFSET)]
    for i, nr in enumerate(numbers):
        to_deny = len(numbers) - i  # jumps over the remaining comparisons and the ALLOW
        prog.append((BPF_JEQ_K, to_deny, 0, nr))
    prog += [(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW), (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM)]
    return prog


def deny(names: Sequence[str] = ADMIN_DENY) -> list[str]:
    """Install the filter on the calling thread (and everything it later starts); the names it covers.
    Requires no_new_privs (set by the sandbox first). Raises OSError when the kernel refuses."""
    machine = platform.machine()
    if machine not in SYSCALLS:
        return []
    prog = program(names, machine)
    filters = (_Filter * len(prog))(*[_Filter(*row) for row in prog])
    fprog = _Prog(len(prog), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    # seccomp(2) with TSYNC filters every thread of the process (torch's too), not only this one
    if libc.syscall(SYS_SECCOMP[machine], SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC,
                    ctypes.byref(fprog)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp filter refused: {errno.errorcode.get(err, err)}")
    return [n for n in names if n in SYSCALLS[machine]]
