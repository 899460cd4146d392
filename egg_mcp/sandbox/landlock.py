"""`confine`: called inside the runner, after torch/triton are imported and before the candidate is.

It sets no_new_privs, drops capabilities (a root runner keeps none), then enforces a Landlock domain:
- read+execute: the Python installation (sys.prefix, base/exec prefix, site-packages, the egg_mcp
  package, the packages already imported such as torch, triton and nvidia's CUDA wheels), /usr,
  /lib*, /bin, /sbin, /proc and /sys, and the few /etc entries in ETC_READ (ld.so.cache, hosts, ...);
- read+write (+ioctl from ABI 5): /dev/nvidia*, /dev/null, /dev/zero, /dev/full, /dev/random, /dev/urandom;
- everything: the private dir (HOME, TMPDIR, Triton's cache, where Triton compiles and loads its .so files),
  /dev/shm when the launcher mounted a private one, and `extra_write`; read+execute: `extra_read`;
- nothing else: /tmp, the workspace, the user's home, the exports, the server's files are unreachable;
- TCP bind/connect denied (ABI 4, unless `network=True`); signals and abstract unix sockets scoped to
  the runner's own domain (ABI 6): it cannot signal the judge, the server or a sibling runner.
Landlock also denies ptrace (and so /proc/<pid>/mem, /proc/<pid>/environ) of any process outside the domain.
"""

from __future__ import annotations

import errno
import glob
import os
import site
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from egg_mcp.config import c_compiler, environment_copy, take_env_marker, take_sandbox_protect
from egg_mcp.sandbox import _sys as S
from egg_mcp.sandbox.env import TOOL_PATH_VARS

if TYPE_CHECKING:
    from egg_mcp.sandbox.report import SandboxReport

SYSTEM_READ = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/proc", "/sys")
# Only what the loader, libc, Python, gcc (Triton's launcher build) and the NVIDIA driver read from /etc:
# a root runner could otherwise read host secrets there (/etc/shadow, TLS keys) by owner permission.
ETC_READ = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ld.so.preload", "localtime", "timezone", "hosts",
            "host.conf", "resolv.conf", "nsswitch.conf", "gai.conf", "passwd", "group", "os-release",
            "lsb-release", "debian_version", "redhat-release", "system-release", "alternatives", "nvidia",
            "OpenCL", "vulkan", "protocols", "services", "mime.types", "machine-id", "environment")
DEVICE_RW = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
DEVICE_GLOBS = ("/dev/nvidia*", "/dev/nvidia-caps/*")

READ = S.FS_READ_FILE | S.FS_READ_DIR
READ_EXEC = READ | S.FS_EXECUTE


def _handled_fs(abi: int) -> int:
    rights = S.FS_ABI1
    if abi >= 2:
        rights |= S.FS_REFER
    if abi >= 3:
        rights |= S.FS_TRUNCATE
    if abi >= 5:
        rights |= S.FS_IOCTL_DEV
    return rights


def python_paths() -> list[str]:
    """Where this interpreter's code lives: prefixes, site-packages, and the packages already imported."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    cwd = os.getcwd()
    for entry in sys.path:  # site dirs and PYTHONPATH entries (a --target install), never the cwd
        if entry and os.path.isabs(entry) and os.path.realpath(entry) != os.path.realpath(cwd):
            paths.add(entry)
    for name, module in list(sys.modules.items()):
        if "." in name or name == "__main__":
            continue
        spec_file = getattr(module, "__file__", None)
        if not spec_file:
            continue
        file = Path(spec_file)
        paths.add(str(file.parent if file.name == "__init__.py" else file))
    import egg_mcp

    paths.add(str(Path(egg_mcp.__file__).resolve().parent))
    kept: list[str] = []
    for p in sorted(os.path.realpath(p) for p in paths if p and os.path.exists(p)):
        if not kept or not p.startswith(kept[-1].rstrip("/") + "/"):  # one rule covers what is beneath it
            kept.append(p)
    return kept


NO_LANDLOCK_NOTE = ("kernel without Landlock (or blocked by seccomp): runners can read and write whatever the "
                    "server's user can. Stronger: Linux >= 5.13 with CONFIG_SECURITY_LANDLOCK=y booted with "
                    "lsm=landlock,... (see /sys/kernel/security/lsm), or run the server in a VM")
"""Said by `confine` (what applied) and `host.probe` (what this host offers) alike."""


_NEVER_GRANTED = ("/", "/usr", "/bin", "/home", "/root", "/opt", "/var", "/tmp", "/etc", "/srv", "/mnt", "/media",
                  "/run", "/dev")


def home_dirs() -> list[str]:
    """The home directories of root, this user and every login user (uid >= 1000) in the password database,
    resolved; never $HOME (in a runner that is its private dir). System accounts' homes (/usr/sbin,
    /var/mail, /nonexistent) are not users' files and are left out."""
    import pwd

    found: list[str] = []
    try:
        entries = [pwd.getpwuid(os.getuid()), *pwd.getpwall()]
    except (KeyError, OSError):
        entries = []
    for entry in entries:
        if not (entry.pw_uid == 0 or entry.pw_uid >= 1000 or entry.pw_uid == os.getuid()) or entry.pw_uid == 65534:
            continue
        home = os.path.realpath(entry.pw_dir or "/")
        if home != "/" and home not in found and os.path.isdir(home):
            found.append(home)
    return found


def protected_paths(extra: Sequence[str | Path] = ()) -> list[str]:
    """What a tool or toolchain grant may never expose: every home directory, plus `extra` (the workspace, the
    user's allowed folders, the job's dir), resolved."""
    out = home_dirs()
    for item in extra:
        if item and str(item).strip():
            real = os.path.realpath(str(item))
            if real not in out:
                out.append(real)
    return out


def split_protect(raw: str | None) -> list[str]:
    """config.PROTECT_VAR's value (or an argv word carrying it) as a list of paths."""
    return [p for p in (raw or "").split(os.pathsep) if p.strip()]


def grantable(path: str | Path, protect: Sequence[str]) -> bool:
    """Whether read access to `path` may be granted to a runner as a tool or toolchain tree: never a top-level
    system dir such as / or /home, never a dir that is or contains one of `protect` (a home directory, the
    workspace, an allowed folder), never a path inside the workspace or an allowed folder. A path inside a home
    directory (~/bin, ~/cuda) is grantable as long as it holds nothing protected."""
    real = Path(os.path.realpath(str(path)))
    if str(real) in _NEVER_GRANTED or len(real.parts) < 2:
        return False
    for item in protect:
        guarded = Path(item)
        if guarded == real or real in guarded.parents:
            return False
    homes = set(home_dirs())
    return not any(Path(item) in real.parents for item in protect if item not in homes)


def tool_grant(tool: str | Path, protect: Sequence[str]) -> str | None:
    """The tree to grant for one tool executable or file: the dir above its bin/ (an install prefix such as
    /opt/gcc), else its own dir; the first of those that is `grantable`, else None (~/bin/cc: ~/bin, never ~)."""
    real = Path(os.path.realpath(str(tool)))
    candidates = (real.parent.parent, real.parent) if real.parent.name == "bin" else (real.parent,)
    for root in candidates:
        if grantable(root, protect):
            return str(root)
    return None


def _tool_paths(protect: Sequence[str] = ()) -> list[str]:
    """Site-set tool paths (TRITON_PTXAS_PATH, CUDA_HOME, ...) that are grantable."""
    protect = list(protect) or protected_paths()
    out = []
    env = environment_copy()
    for var in TOOL_PATH_VARS:
        value = env.get(var)
        if value and os.path.exists(value) and grantable(value, protect):
            out.append(value)
    return out


def _toolchain_paths(protect: Sequence[str] = ()) -> list[str]:
    """Install prefixes of the C toolchain Triton runs to build its launcher (e.g. /opt/gcc on the H200
    image, where exec of /opt/gcc/bin/gcc was denied): the dir above each tool's bin/, or its bin dir where the
    prefix would expose a home directory, the workspace or an allowed folder (`grantable`); /usr is granted anyway."""
    import shutil

    protect = list(protect) or protected_paths()
    out = set()
    for tool in (c_compiler(), "cc", "gcc", "clang", "as", "ld"):
        found = shutil.which(tool) if tool else None
        if found:
            root = tool_grant(found, protect)
            if root and not any(root == s or root.startswith(s + "/") for s in ("/usr", "/bin", "/sbin", "/lib")):
                out.add(root)
    return sorted(out)


def read_grants(private_dir: Path | None = None, *, protect: Sequence[str] = ()) -> list[tuple[str, str]]:
    """(path, why) for every path a confined runner may read, as `confine` would grant them here (for `doctor`)."""
    protect = protected_paths(protect)
    rows = [(p, "system") for p in SYSTEM_READ if os.path.exists(p)]
    rows += [(os.path.join("/etc", n), "/etc entry") for n in ETC_READ if os.path.exists(os.path.join("/etc", n))]
    rows += [(p, "python") for p in python_paths()]
    rows += [(p, "tool path") for p in _tool_paths(protect)]
    rows += [(p, "toolchain") for p in _toolchain_paths(protect)]
    if private_dir is not None:
        rows.append((str(private_dir), "private dir (read+write)"))
    return rows


def _markers(env_allowlist: bool | None, namespaces: str | None) -> tuple[bool, set[str]]:
    """(environment allow-listed, namespaces and private mounts in force). Told by the caller, from its
    argv (the judge's and the launcher's words: launch.py --tell-arg); else the environment allow-list
    from runner_env's marker, which is popped either way so the candidate never sees it."""
    env_marker = take_env_marker()
    if env_allowlist is None:
        env_allowlist = env_marker == "allowlist"
    return bool(env_allowlist), set(filter(None, (namespaces or "").split(",")))


def confine(private_dir: Path, *, extra_read: Sequence[Path] = (), extra_write: Sequence[Path] = (),
            network: bool = False, tcp_ports: Sequence[int] = (), scope_abstract_sockets: bool = True,
            env_allowlist: bool | None = None, namespaces: str | None = None,
            protect: Sequence[str] = ()) -> SandboxReport:
    """Confine the calling process (see module docstring); returns what was actually applied.

    Never raises for a missing kernel feature: the report says what is missing. Raises OSError only
    when a step the kernel offers fails (then the runner must not go on to import the candidate).
    """
    from egg_mcp.sandbox.report import SandboxReport

    return SandboxReport(**confine_dict(private_dir, extra_read=extra_read, extra_write=extra_write, network=network,
                                        tcp_ports=tcp_ports, scope_abstract_sockets=scope_abstract_sockets,
                                        env_allowlist=env_allowlist, namespaces=namespaces, protect=protect))


def confine_dict(private_dir: Path, *, extra_read: Sequence[Path] = (), extra_write: Sequence[Path] = (),
                 network: bool = False, tcp_ports: Sequence[int] = (), scope_abstract_sockets: bool = True,
                 env_allowlist: bool | None = None, namespaces: str | None = None,
                 protect: Sequence[str] = ()) -> dict[str, Any]:
    """`confine` without pydantic (a runner that starts in milliseconds need not import it): the same
    fields as SandboxReport, as a JSON-ready dict; the judge validates it with SandboxReport(**d).

    For a process wrapped by a tool (ncu, compute-sanitizer) whose injection library talks to the tool's
    frontend: `tcp_ports` are the TCP ports it may bind/connect (the tool's port range; every other port
    stays denied) and `scope_abstract_sockets=False` leaves abstract unix sockets unscoped (the frontend
    is outside our domain); signals stay scoped.

    `namespaces`: what the launcher appended to the caller's argv (`--namespaces user,pid,...`), for the
    report and the private /dev/shm rule; `env_allowlist`: whether runner_env built the environment (None:
    read runner_env's marker, the case of a tool-wrapped worker); `protect`: paths no tool or toolchain grant may
    expose besides every home directory (the workspace, the user's allowed folders; config.PROTECT_VAR says them to a
    worker, which pops it here)."""
    report = SimpleNamespace(level="none", env_allowlist=False, landlock_abi=None, fs_confined=False,
                             signals_scoped=False, pid_namespace=False, no_new_privs=False, network_confined=False,
                             capabilities_dropped=False, unconfined_threads=0, abstract_sockets_scoped=False,
                             tcp_ports_allowed=[], notes=[])
    report.env_allowlist, in_force = _markers(env_allowlist, namespaces)
    guarded = protected_paths([*protect, *split_protect(take_sandbox_protect())])
    report.pid_namespace = "pid" in in_force
    if sys.platform != "linux":
        report.notes.append(f"{sys.platform}: no Landlock or namespaces; run the server in a Linux VM/container")
        return _finish(report)
    S.prctl(S.PR_SET_NO_NEW_PRIVS, 1)
    report.no_new_privs = True
    if S.effective_capabilities():
        S.drop_all_capabilities()
    report.capabilities_dropped = S.effective_capabilities() == 0
    abi = S.landlock_abi()
    report.landlock_abi = abi
    if abi is None:
        report.notes.append(NO_LANDLOCK_NOTE)
        return _finish(report)
    attr, size, handled = _ruleset_attr(report, abi, network, scope_abstract_sockets)
    rules = _path_rules(private_dir, abi, handled, guarded, in_force, extra_read, extra_write)
    ports, threads, flags = _restrict_self(attr, size, handled, rules, abi, tcp_ports, network)
    report.fs_confined = True
    _record_confinement(report, abi, scope_abstract_sockets, network, ports, threads, flags)
    return _finish(report)


def _ruleset_attr(report, abi: int, network: bool, scope_abstract_sockets: bool):
    """(ruleset attribute, its size for this ABI, the handled file-system rights); what the ABI cannot
    restrict is noted on `report`."""
    handled = _handled_fs(abi)
    attr = S.RulesetAttr(handled_access_fs=handled)
    size = 8
    if abi >= 4:
        attr.handled_access_net = 0 if network else (S.NET_BIND_TCP | S.NET_CONNECT_TCP)
        size = 16
    else:
        report.notes.append(f"Landlock ABI {abi} < 4: TCP connect/bind not restricted (Linux >= 6.7)")
    if abi >= 6:
        attr.scoped = S.SCOPE_SIGNAL | (S.SCOPE_ABSTRACT_UNIX_SOCKET if scope_abstract_sockets else 0)
        size = 24
        if not scope_abstract_sockets:
            report.notes.append("abstract unix sockets not scoped: a tool wrapping this process (ncu, "
                                "compute-sanitizer) may talk to its injection library through them")
    else:
        report.notes.append(f"Landlock ABI {abi} < 6: signals and abstract unix sockets not scoped "
                            "(Linux >= 6.12); a PID namespace is the remaining guard")
    return attr, size, handled


def _path_rules(private_dir: Path, abi: int, handled: int, guarded, namespaces: set[str], extra_read: Sequence[Path],
                extra_write: Sequence[Path]) -> list[tuple[str, int]]:
    """(path, rights) granted: the system and toolchain read-only, the devices read-write, the private dir
    (and a private /dev/shm, extra_write) with every handled right."""
    private = Path(private_dir).resolve()
    rules: list[tuple[str, int]] = []
    etc = [os.path.join("/etc", name) for name in ETC_READ]
    rules += [(p, READ_EXEC) for p in (*SYSTEM_READ, *etc, *python_paths(), *_tool_paths(guarded),
                                       *_toolchain_paths(guarded),
                                              *map(str, extra_read))]
    devices = [*DEVICE_RW, *[d for g in DEVICE_GLOBS for d in glob.glob(g)]]
    dev_rights = READ | S.FS_WRITE_FILE | (S.FS_IOCTL_DEV if abi >= 5 else 0) | (S.FS_TRUNCATE if abi >= 3 else 0)
    rules += [(d, dev_rights) for d in devices]
    # /dev/shm only where the launcher mounted a private one (the host's is shared by every process)
    shm = ["/dev/shm"] if "shm" in namespaces else []
    rules += [(str(p), handled) for p in (private, *shm, *extra_write)]
    return rules


def _restrict_self(attr, size: int, handled: int, rules: list[tuple[str, int]], abi: int, tcp_ports: Sequence[int],
                   network: bool) -> tuple[list[int], int, int]:
    """Build the ruleset and confine this process; returns (TCP ports allowed, threads before, the TSYNC flag used)."""
    ruleset = S.landlock_create_ruleset(attr, size)
    try:
        for path, rights in rules:
            if not os.path.exists(path):
                continue
            rights &= handled
            if not os.path.isdir(path):
                rights &= S.FS_FILE_RIGHTS
            try:
                S.landlock_add_path(ruleset, path, rights)
            except (PermissionError, FileNotFoundError):
                continue  # open(O_PATH) refused: the runner's user cannot reach it anyway
        ports = sorted({int(p) for p in tcp_ports}) if abi >= 4 and not network else []
        for port in ports:
            S.landlock_add_port(ruleset, port, S.NET_BIND_TCP | S.NET_CONNECT_TCP)
        threads = len(os.listdir("/proc/self/task"))
        flags = S.LANDLOCK_RESTRICT_SELF_TSYNC if abi >= 8 else 0
        try:
            S.landlock_restrict_self(ruleset, flags)
        except OSError as exc:
            if not flags or exc.errno != errno.EINVAL:
                raise
            flags = 0  # a kernel whose ABI 8 lacks TSYNC: this thread and later ones only
            S.landlock_restrict_self(ruleset, flags)
    finally:
        os.close(ruleset)
    return ports, threads, flags


def _record_confinement(report, abi: int, scope_abstract_sockets: bool, network: bool, ports: list[int], threads: int,
                        flags: int) -> None:
    """What the confinement holds, on `report`, with a note for each gap."""
    if abi < 2:
        _allow_cross_directory_renames()
        report.notes.append("Landlock ABI 1 denies every cross-directory rename (EXDEV); os.replace/os.rename "
                            "fall back to copy + unlink inside the runner (Triton's cache needs it)")
    report.signals_scoped = abi >= 6
    report.abstract_sockets_scoped = abi >= 6 and scope_abstract_sockets
    report.network_confined = abi >= 4 and not network
    report.tcp_ports_allowed = ports
    if ports:
        report.notes.append(f"TCP bind/connect allowed on ports {ports[0]}-{ports[-1]} only (the wrapping tool's "
                            "port range), denied on every other port")
    if threads > 1 and not flags:
        report.unconfined_threads = threads - 1
        report.notes.append(f"{threads - 1} thread(s) started before confine (e.g. by import torch) stay outside "
                            "the Landlock "
                            f"domain (ABI {abi} < 8 has no TSYNC); code that hijacks one escapes the file rules")


def _allow_cross_directory_renames() -> None:
    """ABI 1 has no REFER right: a rename to another directory always fails with EXDEV, even inside the
    private dir, and Triton's cache renames a file out of its temporary directory. Fall back to a copy."""
    import shutil

    def fallback(original):
        def rename(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
            try:
                return original(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
            except OSError as exc:
                if exc.errno != errno.EXDEV or src_dir_fd is not None or dst_dir_fd is not None:
                    raise
                if os.path.isdir(src):
                    shutil.copytree(src, dst, dirs_exist_ok=True)
                    shutil.rmtree(src)
                else:
                    shutil.copy2(src, dst)
                    os.unlink(src)
        return rename

    os.replace = fallback(os.replace)
    os.rename = fallback(os.rename)


def _finish(report: SimpleNamespace) -> dict[str, Any]:
    if report.fs_confined:
        report.level = "landlock+ns" if report.pid_namespace else "landlock"
    elif report.env_allowlist:
        report.level = "env"
    if not report.pid_namespace:
        report.notes.append("no PID namespace: the runner can see other processes in /proc (not their memory or "
                            "environment under Landlock); start it with spawn_prefix()")
    return dict(vars(report))
