"""Raw Linux syscalls through ctypes: Landlock, prctl, capset. Nothing here decides policy."""

from __future__ import annotations

import ctypes
import errno
import os
import platform

SYS_LANDLOCK_CREATE_RULESET = 444  # same numbers on x86-64 and aarch64 (new syscalls share one table)
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}.get(platform.machine())

LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
LANDLOCK_RULE_PATH_BENEATH = 1
LANDLOCK_RULE_NET_PORT = 2  # ABI 4
LANDLOCK_RESTRICT_SELF_TSYNC = 1 << 3  # ABI 8: apply to every thread of the process

# enum landlock_access_fs (include/uapi/linux/landlock.h)
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13       # ABI 2
FS_TRUNCATE = 1 << 14    # ABI 3
FS_IOCTL_DEV = 1 << 15   # ABI 5
NET_BIND_TCP = 1 << 0    # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

FS_ABI1 = (1 << 13) - 1
# Rights that make sense on a regular or device file (others are EINVAL on a non-directory rule).
FS_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


class RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the uapi header: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class NetPortAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the uapi header: 16 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    return _check(_libc.prctl(option, arg2, arg3, arg4, arg5), f"prctl({option})")


def landlock_abi() -> int | None:
    """The kernel's Landlock ABI version, or None (not built in, disabled at boot, or filtered by seccomp)."""
    if platform.system() != "Linux":
        return None
    ret = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                        ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    if ret < 0:
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
            return None
        raise OSError(err, f"landlock_create_ruleset(VERSION): {os.strerror(err)}")
    return int(ret)


def landlock_create_ruleset(attr: RulesetAttr, size: int) -> int:
    return _check(_libc.syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size),
                                ctypes.c_uint32(0)), "landlock_create_ruleset")


def landlock_add_path(ruleset_fd: int, path: str, access: int) -> None:
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        attr = PathBeneathAttr(access, fd)
        _check(_libc.syscall(SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset_fd), ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH),
                             ctypes.byref(attr), ctypes.c_uint32(0)), f"landlock_add_rule({path})")
    finally:
        os.close(fd)


def landlock_add_port(ruleset_fd: int, port: int, access: int) -> None:
    """Allow `access` (NET_BIND_TCP / NET_CONNECT_TCP) on one TCP port (ABI 4)."""
    attr = NetPortAttr(access, port)
    _check(_libc.syscall(SYS_LANDLOCK_ADD_RULE, ctypes.c_int(ruleset_fd), ctypes.c_int(LANDLOCK_RULE_NET_PORT),
                         ctypes.byref(attr), ctypes.c_uint32(0)), f"landlock_add_rule(port {port})")


def landlock_restrict_self(ruleset_fd: int, flags: int = 0) -> None:
    _check(_libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset_fd), ctypes.c_uint32(flags)),
           "landlock_restrict_self")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_all_capabilities() -> None:
    """Empty the bounding, ambient, effective, permitted and inheritable sets of the calling thread."""
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last + 1):
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
    try:
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    except OSError:
        pass  # kernels before 4.3 have no ambient set
    if SYS_CAPSET is None:
        raise OSError(errno.ENOSYS, f"capset syscall number unknown on {platform.machine()}")
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    _check(_libc.syscall(SYS_CAPSET, ctypes.byref(header), ctypes.byref(data)), "capset")


def effective_capabilities() -> int:
    """CapEff of this thread, from /proc (0 for an ordinary user)."""
    for line in open("/proc/thread-self/status"):
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0
