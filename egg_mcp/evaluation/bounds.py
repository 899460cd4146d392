"""Resource bounds of one runner (the process that imports candidate code: verify's, and memcheck's under
compute-sanitizer): memory, file size, process count and scratch size, derived from the problem's footprint
with a floor so honest work (torch, Triton's compiler, the interpreter) always fits.

Two layers, because no single kernel mechanism bounds all four on every host:

* rlimits, set by the runner on itself when the judge sends the job's `confine` command, after its start-up
  and before the reference or the candidate is imported (runner_loop -> CandidateSide.confine):
  - RLIMIT_FSIZE: one file larger than `file_bytes` cannot be written (Python gets EFBIG; a child program
    gets SIGXFSZ);
  - RLIMIT_DATA (the Triton interpreter only): private writable memory of the runner process. Never on a
    GPU runner and never RLIMIT_AS anywhere: the CUDA driver reserves address ranges far larger than any
    bound (RLIMIT_AS breaks cuInit), and the host mappings CUDA commits later (pinned staging buffers, UVM)
    are not ours to predict, so a GPU runner's memory is bounded by the watchdog alone;
  - RLIMIT_NPROC, only where the runner has its own user namespace (egg_mcp.sandbox.launch) and is not
    uid 0 there: the kernel counts it per user namespace (Linux >= 5.14), so it counts the runner's tasks
    and not the server's or another job's; outside one it would count every process of the user, and uid 0
    is exempt from it altogether;
  - RLIMIT_CORE 0: no core file of a 6 GiB process in the scratch dir.
* the judge's watchdog (RunnerProcess.recv polls it): the resident memory and the task count of the whole
  runner tree (a candidate's children included) and the total size of the runner's private dir. Over a
  bound, the judge kills the runner tree and the verdict names the bound. It polls (0.25 s), so it is a
  bound with a short overshoot, not a hard wall; the host's OOM killer stays the last resort.

cgroup v2 (memory.max, pids.max) would make both hard walls, but it needs a delegated cgroup the server
can create children in (systemd `Delegate=yes`); `host_bounds()` says whether this host has one, and doctor
prints which bounds are in force. Environment variables are read in config.py only.
"""

from __future__ import annotations

import errno
import os
import resource
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

GIB = 2**30
MIB = 2**20

MEMORY_FLOOR = 4 * GIB
"""A runner that imported torch and Triton holds ~0.5-1 GiB (a GPU runner's CUDA context more): four GiB
leave room for the reference's and the candidate's tensors of any small problem."""
MEMORY_FACTOR = 6
"""Memory bound = floor + this many times the problem's footprint (inputs, parameters; the outputs, the
reference's and the candidate's temporaries and the judge's copies come on top of them)."""
FILE_FLOOR = 1 * GIB
SCRATCH_FLOOR = 2 * GIB
"""Triton's cache and the interpreter's files are a few MB per kernel; a candidate that writes its inputs out
once still fits."""
SCRATCH_FACTOR = 2
SCRATCH_MAX_ENTRIES = 20000
"""More files than this in the private dir is over the scratch bound too (and stops the walk)."""
TASKS_FLOOR = 256
"""Tasks (processes and threads) of a runner tree: torch's intra-op pool (one per core), the interpreter,
Triton's compiler processes and a few of the candidate's own threads fit."""


def size(n: int) -> str:
    """Bytes as people read them: '24 MiB', '1.5 GiB'."""
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB"


@dataclass(frozen=True)
class Bounds:
    memory_bytes: int
    file_bytes: int
    scratch_bytes: int
    tasks: int
    footprint_bytes: int = 0

    def describe(self) -> str:
        return (f"memory {size(self.memory_bytes)}, file {size(self.file_bytes)}, scratch {size(self.scratch_bytes)}, "
                f"{self.tasks} tasks")

    def to_wire(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_wire(cls, raw: Any) -> Bounds | None:
        if not isinstance(raw, dict):
            return None
        try:
            values = {k: int(raw[k]) for k in ("memory_bytes", "file_bytes", "scratch_bytes", "tasks")}
        except (KeyError, TypeError, ValueError):
            return None
        if min(values.values()) <= 0:
            return None
        return cls(**values, footprint_bytes=max(0, int(raw.get("footprint_bytes") or 0)))


FLOOR_KEYS = ("memory_bytes", "file_bytes", "scratch_bytes", "tasks")


def _configured(raw: Any) -> dict[str, int]:
    """The floors `raw` sets: its positive ints under FLOOR_KEYS."""
    return {key: value for key, value in (raw.items() if isinstance(raw, dict) else ())
            if key in FLOOR_KEYS and isinstance(value, int) and not isinstance(value, bool) and value > 0}


def floors(raw: Any = None) -> dict[str, int]:
    """The floors, with the positive ints of `raw` (the server's configuration, a test's) in place of defaults."""
    return {"memory_bytes": MEMORY_FLOOR, "file_bytes": FILE_FLOOR, "scratch_bytes": SCRATCH_FLOOR,
            "tasks": TASKS_FLOOR, **_configured(raw)}


def derive(footprint_bytes: int, cpu_count: int | None = None, floor: Any = None) -> Bounds:
    """The bounds of a job whose problem holds `footprint_bytes` (inputs + parameters at the job's sizes).
    `floor`: the configured floors as sent in a job's payload (`bounds_floor`); a task floor it does not set
    grows with this host's cores (torch's intra-op pool has a thread per core)."""
    footprint = max(0, int(footprint_bytes))
    cores = cpu_count or os.cpu_count() or 1
    low = floors(floor)
    return Bounds(
        memory_bytes=low["memory_bytes"] + MEMORY_FACTOR * footprint,
        file_bytes=max(low["file_bytes"], footprint),
        scratch_bytes=max(low["scratch_bytes"], SCRATCH_FACTOR * footprint),
        tasks=low["tasks"] if "tasks" in _configured(floor) else max(low["tasks"], 64 + 4 * cores),
        footprint_bytes=footprint,
    )


def for_job(footprint_bytes: int, payload: Any, cpu_count: int | None = None) -> Bounds:
    """The bounds of a verify or a memcheck runner (one path for both judges): `derive` over the floors the
    engine sent in the job's payload (`bounds_floor`: the server's configuration, a test's)."""
    return derive(footprint_bytes, cpu_count, floor=payload.get("bounds_floor") if isinstance(payload, dict) else None)


def footprint_of(module: Any, model: Any, device: str, dtype: Any) -> int:
    """Bytes of one input set (shapes only: made on the meta device) and of the model's parameters and buffers.
    0 when the problem cannot say (the floor applies)."""
    import torch

    total = 0
    try:
        with torch.device("meta"):
            values = module.get_inputs()
        for v in values if isinstance(values, (list, tuple)) else [values]:
            if isinstance(v, torch.Tensor):
                size = dtype.itemsize if v.is_floating_point() else v.element_size()
                total += v.numel() * size
    except Exception:  # noqa: BLE001 - a get_inputs that needs real tensors: parameters only
        pass
    if isinstance(model, torch.nn.Module):
        for t in (*model.parameters(), *model.buffers()):
            total += t.numel() * t.element_size()
    return total


def reference_footprint(source: str, options: Any, init_seed: int, device: str, workdir: Path) -> int:
    """`footprint_of` for a judge that holds no reference model (memcheck's): the reference imported into
    `workdir` at the job's sizes, its model built on the meta device (no memory), else on `device` as verify's
    judge builds it. 0 when the reference does not load (the floor applies; the runner reports the failure)."""
    import secrets

    import torch

    from egg_mcp.contract import EvalOptions
    from egg_mcp.problems.modules import import_source
    from egg_mcp.problems.problem import DTYPES, Problem, apply_size_overrides

    opts = EvalOptions.model_validate(options)
    dtype = DTYPES[opts.dtype]
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        module = import_source(source, workdir / "reference.py", f"egg_reference_{secrets.token_hex(4)}")
        apply_size_overrides(module, None, opts.size_overrides)
    except Exception:  # noqa: BLE001 - the runner loads it too and reports why it failed
        return 0
    model = None
    for where in ("meta", device):
        try:
            with torch.device(where):
                problem = Problem(module, where, dtype)
                model = problem.build(module.Model, problem.init_inputs(init_seed), init_seed)
            break
        except Exception:  # noqa: BLE001 - a constructor that needs real values: build it for real
            continue
    total = footprint_of(module, model, device, dtype)
    del model
    if device == "cuda" and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    return total


# ---------------------------------------------------------------------------- runner side (rlimits)

_in_force: dict[str, Any] = {}


THREAD_STACK_ROOM = 16 * MIB
"""RLIMIT_DATA counts every thread's stack (8 MiB, mapped whole, mostly never touched): per core, this much room
on top of the memory bound, for torch's intra-op pool."""


def data_limit(bounds: Bounds, cpu_count: int | None = None) -> int:
    """The RLIMIT_DATA of an interpreter runner: the memory bound plus room for its threads' stacks."""
    return bounds.memory_bytes + (cpu_count or os.cpu_count() or 1) * THREAD_STACK_ROOM


def apply_rlimits(bounds: Bounds, *, interpreter: bool, namespaces: str | None) -> dict[str, Any]:
    """In the runner, before the reference or the candidate is imported: lower this process's rlimits (soft and
    hard, so candidate code cannot raise them back). What is in force and what is not, and why."""
    done: dict[str, Any] = {"file_bytes": None, "data_bytes": None, "nproc": None, "core": None, "not": []}

    def lower(which: int, value: int) -> bool:
        soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        try:
            resource.setrlimit(which, (value, value))
            return True
        except (ValueError, OSError):
            return False

    if lower(resource.RLIMIT_FSIZE, bounds.file_bytes):
        done["file_bytes"] = bounds.file_bytes
    if lower(resource.RLIMIT_CORE, 0):
        done["core"] = 0
    if interpreter:
        data = data_limit(bounds)
        if lower(resource.RLIMIT_DATA, data):
            done["data_bytes"] = data
    else:
        done["not"].append("RLIMIT_DATA/RLIMIT_AS: not on a GPU runner (CUDA's address reservations); its memory "
                           "is bounded by the judge's watchdog")
    own_userns = bool(namespaces) and "user" in str(namespaces).split(",")
    if own_userns and os.getuid() != 0:
        if lower(resource.RLIMIT_NPROC, bounds.tasks):
            done["nproc"] = bounds.tasks
    else:
        done["not"].append("RLIMIT_NPROC: " + ("uid 0 is exempt from it" if own_userns else
                                               "no user namespace of its own (it would count every process of "
                                               "the user)") + "; tasks are bounded by the judge's watchdog")
    _in_force.clear()
    _in_force.update(done)
    return done


def apply_job_rlimits(file_bytes: int = FILE_FLOOR) -> dict[str, Any]:
    """In a worker that runs user or candidate code itself (profiling, tiling trials, compare, analysis): the
    file-size bound and no core file. Its memory and tasks are not bounded here: the job's problem sizes are
    not known to it, and its process is the one the engine's timeout kills."""
    done: dict[str, Any] = {"file_bytes": None, "data_bytes": None, "nproc": None, "core": None,
                            "not": ["memory and tasks: not bounded in a profiling/tiling/analysis job"]}
    for which, value, key in ((resource.RLIMIT_FSIZE, file_bytes, "file_bytes"), (resource.RLIMIT_CORE, 0, "core")):
        hard = resource.getrlimit(which)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        try:
            resource.setrlimit(which, (value, value))
            done[key] = value
        except (ValueError, OSError):
            pass
    _in_force.clear()
    _in_force.update(done)
    return done


def over_bound_note(exc: BaseException) -> tuple[str, str] | None:
    """(error kind, what to add to the message) when `exc` is a bound the runner set: a write past the file-size
    bound (EFBIG), an allocation past the memory bound (MemoryError), a fork past the process bound (EAGAIN)."""
    from egg_mcp.evaluation.errors import exception_chain

    for item in exception_chain(exc):
        if isinstance(item, OSError) and item.errno == errno.EFBIG and _in_force.get("file_bytes"):
            return ("resource_limit", f"a file reached the runner's file-size bound "
                    f"({size(_in_force['file_bytes'])}, RLIMIT_FSIZE)")
        if isinstance(item, BlockingIOError) and item.errno == errno.EAGAIN and _in_force.get("nproc"):
            return ("resource_limit", f"a new process or thread was refused at the runner's process bound "
                    f"({_in_force['nproc']} tasks, RLIMIT_NPROC)")
        torch_cpu_oom = isinstance(item, RuntimeError) and "DefaultCPUAllocator: can't allocate memory" in str(item)
        if (isinstance(item, MemoryError) or torch_cpu_oom) and _in_force.get("data_bytes"):
            return ("oom", f"an allocation reached the runner's memory bound "
                    f"({size(_in_force['data_bytes'])}, RLIMIT_DATA)")
    return None


# ---------------------------------------------------------------------------- judge side (watchdog)

def _status(pid: int) -> tuple[int, int]:
    """(resident anonymous + shared-memory bytes, threads) of one process; (0, 0) when it is gone."""
    rss, threads = 0, 0
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith((b"RssAnon:", b"RssShmem:")):
                    rss += int(line.split()[1]) * 1024
                elif line.startswith(b"Threads:"):
                    threads = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return 0, 0
    return rss, threads


def tree_usage(pids: list[int]) -> tuple[int, int]:
    """(resident bytes, tasks) of these processes together: anonymous and shared memory (file-backed pages,
    the shared libraries, are not counted), and every thread as one task."""
    rss, tasks = 0, 0
    for pid in pids:
        r, t = _status(pid)
        rss += r
        tasks += t
    return rss, tasks


def dir_usage(root: Path, max_entries: int = SCRATCH_MAX_ENTRIES) -> tuple[int, int]:
    """(bytes allocated, entries) under `root`, the walk stopped after `max_entries` entries."""
    total, entries, todo = 0, 0, [str(root)]
    while todo and entries <= max_entries:
        try:
            it = os.scandir(todo.pop())
        except OSError:
            continue
        with it:
            for entry in it:
                entries += 1
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    todo.append(entry.path)
                else:
                    total += st.st_blocks * 512
                if entries > max_entries:
                    break
    return total, entries


def _pss(pid: int) -> int | None:
    """Proportional anonymous + shared-memory bytes of one process (a page shared by n processes counts 1/n
    in each); None when smaps_rollup cannot be read (then its resident size stands)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            fields = {}
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[0].endswith(b":"):
                    fields[parts[0][:-1]] = int(parts[1]) * 1024
    except (OSError, ValueError):
        return None
    if b"Pss_Anon" in fields:
        return fields[b"Pss_Anon"] + fields.get(b"Pss_Shmem", 0)
    return fields.get(b"Pss")


def tree_memory(pids: list[int], rss: int, limit: int) -> int:
    """The tree's memory: `rss` (the sum of resident anonymous pages, cheap) while that is within `limit`; past
    it, the proportional sum (smaps_rollup: a forked child's copy-on-write pages shared with its parent are no
    longer counted twice), each process whose smaps cannot be read counted by its resident size."""
    if rss <= limit:
        return rss
    total = 0
    for pid in pids:
        pss = _pss(pid)
        total += pss if pss is not None else _status(pid)[0]
    return total


def over_bounds(bounds: Bounds, pids: list[int], scratch: Path | None,
                usage: tuple[int, int] | None = None) -> tuple[str, str] | None:
    """(error kind, message) when the runner tree or its scratch dir is over a bound, else None. `usage`: the
    tree's (resident bytes, tasks) when the caller read them already (tree_usage)."""
    rss, tasks = usage if usage is not None else tree_usage(pids)
    if tasks > bounds.tasks:
        return ("resource_limit", f"the candidate's runner had {tasks} processes and threads, over its bound of "
                f"{bounds.tasks}; it was killed")
    used = tree_memory(pids, rss, bounds.memory_bytes)
    if used > bounds.memory_bytes:
        return ("oom", f"the candidate's runner used {size(used)} of memory, over its bound of "
                f"{size(bounds.memory_bytes)} (derived from the problem's footprint); it was killed")
    if scratch is not None:
        used, entries = dir_usage(scratch)
        if used > bounds.scratch_bytes:
            return ("resource_limit", f"the candidate's runner wrote {size(used)} into its scratch dir, "
                    f"over its bound of {size(bounds.scratch_bytes)}; it was killed")
        if entries > SCRATCH_MAX_ENTRIES:
            return ("resource_limit", f"the candidate's runner made more than {SCRATCH_MAX_ENTRIES} files in its "
                    "scratch dir; it was killed")
    return None


# ---------------------------------------------------------------------------- what this host offers (doctor)

def _cgroup_v2() -> tuple[bool, str]:
    """Whether runners could be put in child cgroups with memory.max and pids.max here."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return False, "no /proc/self/cgroup"
    unified = [ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")]
    if not unified or len(lines) > 1:
        return False, "cgroup v1 or hybrid hierarchy (no unified cgroup v2)"
    here = Path("/sys/fs/cgroup") / unified[0].lstrip("/")
    try:
        controllers = (here / "cgroup.controllers").read_text().split()
    except OSError:
        return False, f"{here} is not readable"
    missing = [c for c in ("memory", "pids") if c not in controllers]
    if missing:
        return False, f"controllers {', '.join(missing)} not delegated to {here}"
    if not os.access(here, os.W_OK):
        return False, f"{here} is not writable by the server's user (no delegated cgroup)"
    return False, (f"{here} is delegated with memory and pids, but egg-mcp does not move runners into child "
                   "cgroups yet")


def host_bounds() -> list[tuple[str, str]]:
    """(status, line) pairs for doctor: which bound is in force and how, which is not."""
    from egg_mcp.sandbox.host import _namespaces

    names, _ = _namespaces()
    floor = derive(0)
    lines = [("ok", f"per-job bounds, at least: {floor.describe()} (more for large problems: "
                    f"{MEMORY_FACTOR}x the footprint on top of the memory floor)"),
             ("ok", "on every runner: verify's, and memcheck's under compute-sanitizer (its frontend counted in the "
                    "runner tree); a Ray lane's runners get them on their node (its cores set the task floor)"),
             ("ok", "file size: RLIMIT_FSIZE in every runner; scratch total: the judge's watchdog"),
             ("ok", "memory: RLIMIT_DATA on interpreter runners; the judge's watchdog (resident memory of the runner "
                    "tree, polled every 0.25 s) on every runner, GPU runners included (no RLIMIT_AS: CUDA)")]
    if "user" in names and os.getuid() != 0:
        lines.append(("ok", "processes: RLIMIT_NPROC in the runner's own user namespace, and the watchdog"))
    else:
        why = "the server runs as root (exempt from RLIMIT_NPROC)" if os.getuid() == 0 else \
            "no user namespace for runners (RLIMIT_NPROC would count every process of the user)"
        lines.append(("warn", f"processes: the judge's watchdog only, polled (a fast fork burst overshoots "
                              f"before it is killed): {why}"))
    ok, why = _cgroup_v2()
    lines.append(("ok" if ok else "warn", f"cgroup v2 hard walls (memory.max, pids.max): not used: {why}"))
    return lines
