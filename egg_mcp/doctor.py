"""`egg-mcp doctor`: one line per check of what this machine offers egg-mcp."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import textwrap
import time

from egg_mcp.cluster.reach import call_with_deadline, unreachable_reason
from egg_mcp.config import ServerConfig, environment_copy
from egg_mcp.hardware import NO_GPU, ceiling, gpu_for, nvml_gpu_names, nvml_gpu_uuids, unknown_gpu_message
from egg_mcp.profiling.ncu_command import find_ncu

OK, WARN, FAIL = "ok  ", "warn", "FAIL"
RAY_CHECK_S = 12.0  # the whole Ray check, the probe included (doctor --ray stays under 15 s)


def _memcheck_line(gpu: bool) -> None:
    """compute-sanitizer: what commit_stage's memory check will do on this host."""
    from egg_mcp.evaluation.memcheck import find_compute_sanitizer

    tool = find_compute_sanitizer()
    if not gpu:
        _line(OK, "memcheck", "no GPU: verify's guarded allocations catch out-of-bounds writes (no sanitizer needed)")
    elif tool is None:
        _line(WARN, "memcheck", "compute-sanitizer not found: commits get guarded allocations only (install the CUDA "
              "toolkit or set EGG_MCP_COMPUTE_SANITIZER)")
    else:
        _line(OK, "memcheck", f"{tool}: commit_stage runs one memcheck forward per candidate")


def _line(status: str, what: str, detail: str) -> None:
    print(f"[{status}] {what:<22} {detail}", flush=True)


_INTERPRETER_PROBE = textwrap.dedent("""
    import torch, triton, triton.language as tl
    @triton.jit
    def k(x, y, n, B: tl.constexpr):
        o = tl.program_id(0) * B + tl.arange(0, B)
        tl.store(y + o, tl.load(x + o, mask=o < n) * 2, mask=o < n)
    x = torch.arange(10, dtype=torch.float32); y = torch.empty_like(x)
    k[(1,)](x, y, 10, B=16)
    assert torch.equal(y, 2 * x), y
    print("ok")
""")

_NCU_PROBE = "import torch; x = torch.ones(1024, device='cuda'); (x * 2).sum().item()"


def read_grant_lines(config: ServerConfig) -> list[tuple[str, str, str]]:
    """(status, what, detail): every path a confined runner may read here (landlock.read_grants), the
    toolchain and tool trees after the filter that keeps out home directories, the workspace and the allowed
    folders; the /etc entries on one line."""
    from egg_mcp.sandbox.landlock import read_grants

    protect = [config.workspace, *config.readable_roots()]
    rows = read_grants(protect=[str(p) for p in protect])
    etc = [os.path.basename(p) for p, why in rows if why == "/etc entry"]
    out = [(OK, "runner reads", f"{path} ({why})") for path, why in rows if why != "/etc entry"]
    out.append((OK, "runner reads", f"/etc: {', '.join(etc)}"))
    out.append((OK, "runner writes", "its private dir (HOME, TMPDIR, caches), /dev/null and friends, /dev/nvidia*; "
                "never a home directory, the workspace or an allowed folder"))
    return out


def _sandbox_lines(config: ServerConfig | None = None) -> None:
    """What confines a runner (the process that imports candidate code) here, how to get more, and what a
    runner can read."""
    from egg_mcp.sandbox import probe

    report = probe()
    _line(OK if report.level == "landlock+ns" else WARN, "sandbox", report.summary())
    for note in report.notes:
        _line(OK if note.startswith("namespaces:") else WARN, "", note)
    if report.level != "landlock+ns":
        _line(WARN, "", "see docs/sandbox.md for the levels and what each one keeps out")
    from egg_mcp.sandbox.floor import floor_for

    config = config or ServerConfig()
    assert config is not None  # (ServerConfig is built on first use: type checkers read it as unknown)
    floor = floor_for(report, config.unsafe_sandbox_floor)
    if floor.runs_candidates and not floor.weak:
        _line(OK, "sandbox floor", "met: serve runs candidates; each runner must have " +
              ", ".join(floor.required))
    else:
        _line(WARN, "sandbox floor", floor.line().removeprefix("sandbox: "))
    if report.fs_confined:
        for status, what, detail in read_grant_lines(config):
            _line(status, what, detail)
    else:
        _line(WARN, "runner reads", "every file this server's user can (no Landlock here)")


def _bounds_lines() -> None:
    """Which per-job resource bound is in force for runners here, by what mechanism, and which is not."""
    from egg_mcp.evaluation.bounds import host_bounds

    for i, (status, detail) in enumerate(host_bounds()):
        _line(OK if status == "ok" else WARN, "bounds" if i == 0 else "", detail)


def hardware_lines(names: list[str], uuids: list[str], workspace) -> list[tuple[str, str, str]]:
    """(status, what, detail) per GPU: its ceilings and where each comes from (measured here and when, a
    datasheet lead, or none: unknown GPU / no GPU)."""
    if not names:
        return [(WARN, "NVML", f"{NO_GPU}: no NVIDIA driver/GPU visible (nvidia-ml-py found nothing); no ceilings")]
    out = []
    for i, name in enumerate(names):
        spec = gpu_for(name, uuids[i] if i < len(uuids) else None, workspace)
        if spec is None:
            out.append((WARN, f"GPU {i} (NVML)", unknown_gpu_message(name)))
            continue
        how = (f"calibrated {spec.measured_at}" if spec.source == "measured"
               else "datasheet leads only: run `egg-mcp calibrate` to measure this GPU")
        out.append((OK, f"GPU {i} (NVML)", f"{name}: {how}"))
        for key in ("dram", "fp32", "tf32x3", "fp16x3", "bf16x3", "tf32", "bf16", "fp8"):
            out.append((OK, f"  ceiling {key}", ceiling(spec, key).label()))
    return out


def lane_lines(config: ServerConfig) -> list[tuple[str, str, str]]:
    """How `serve` would evaluate: one local lane per visible GPU, or the Ray cluster's GPUs by model."""
    from egg_mcp.cluster.lanes import visible_gpus

    gpus = [] if config.force_interpreter else visible_gpus()
    local = (f"{len(gpus)} local lane(s), one per GPU: " + ", ".join(f"gpu{d} {m}" for d, m in gpus)) if gpus \
        else "no GPU lane: one CPU engine (interpreter)"
    out = [(OK, "lanes", local)]
    if not config.ray_address:
        return out
    from egg_mcp.cluster.ray_lanes import EXTRA, ClusterError, describe_cluster, require_ray

    address = config.ray_address
    try:
        ray = require_ray()
    except ClusterError as exc:
        return out + [(FAIL, "ray cluster", str(exc))]
    start = time.monotonic()
    if not ray.is_initialized():
        # a TCP probe first: ray.init on a stale record or a closed port retries for minutes
        target, why = unreachable_reason(address)
        if why is not None:
            return out + [(FAIL, "ray cluster", f"no reachable Ray cluster at {target}: {why}")]

    def join_and_describe():
        if not ray.is_initialized():
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
        return describe_cluster()

    done, view = call_with_deadline(join_and_describe, RAY_CHECK_S - (time.monotonic() - start))
    if not done:
        if view is None:
            why = f"it answers on the network but did not accept a Ray driver within {RAY_CHECK_S:g} s"
        else:
            why = str(view).strip().splitlines()[0][:240] if str(view).strip() else type(view).__name__
        return out + [(FAIL, "ray cluster", f"no reachable Ray cluster at {address}: {why}")]
    models = ", ".join(f"{n:g} x {m}" for m, n in view["gpus_by_model"].items()) or "no GPU (CPU lanes, interpreter)"
    out.append((OK, "ray cluster", f"{config.ray_address}: {view['nodes_alive']} node(s) alive "
                f"({view['nodes_dead']} dead), GPUs {models}; free now: {view['gpus_free']:g} GPU(s)"))
    out.append((OK, "", f"every node needs egg-mcp, torch and triton installed ({EXTRA}); jobs carry their sources"))
    out.append((OK, "", "each node's runners are held to this server's sandbox floor (below) and get its protected "
                "paths and runner bounds; a node whose runners lack a layer runs no candidate: run doctor there"))
    return out


def run_doctor(config: ServerConfig, *, start_empty: bool = False) -> int:
    _line(OK, "python", sys.version.split()[0])
    failures = _mcp_line()
    torch = _torch_lines()
    if torch is None:
        return 1
    for status, what, detail in hardware_lines(nvml_gpu_names(), nvml_gpu_uuids(), config.workspace):
        _line(status, what, detail)
    for status, what, detail in lane_lines(config):
        _line(status, what, detail)
        failures += status == FAIL
    failures += _triton_line()
    failures += _interpreter_line()
    _sandbox_lines(config)
    _bounds_lines()
    _memcheck_line(torch.cuda.is_available())
    _ncu_line(torch.cuda.is_available())
    failures += _workspace_lines(config, start_empty)
    failures += _kernelbench_line(config)
    return 1 if failures else 0


def _mcp_line() -> int:
    try:
        from importlib.metadata import version

        import mcp  # noqa: F401

        _line(OK, "mcp SDK", version("mcp"))
    except Exception as exc:  # pragma: no cover - install problem
        _line(FAIL, "mcp SDK", f"not importable: {exc}")
        return 1
    return 0


def _torch_lines():
    """torch and the GPUs it sees; None when torch cannot be imported (nothing else can be checked)."""
    try:
        import torch

        _line(OK, "torch", f"{torch.__version__} (CUDA build: {torch.version.cuda or 'none'})")
        cuda = torch.cuda.is_available()
        if cuda:
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                _line(OK, f"GPU {i} (torch)", f"{p.name}, {p.multi_processor_count} SMs, "
                      f"{p.total_memory / 2**30:.0f} GiB, sm_{p.major}{p.minor}")
        else:
            _line(WARN, "GPU (torch)", "none: verification runs in the Triton CPU interpreter, no timing")
    except Exception as exc:
        _line(FAIL, "torch", f"not importable: {exc}")
        return None
    return torch


def _triton_line() -> int:
    try:
        import triton

        _line(OK, "triton", triton.__version__)
    except Exception as exc:
        _line(FAIL, "triton", f"not importable: {exc}")
        return 1
    return 0


def _interpreter_line() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(environment_copy(), TRITON_INTERPRET="1", TRITON_CACHE_DIR=tmp)
        probe = subprocess.run([sys.executable, "-c", _INTERPRETER_PROBE], env=env, capture_output=True, text=True,
                               timeout=120)
        if probe.returncode == 0:
            _line(OK, "interpreter", "TRITON_INTERPRET=1 runs a kernel correctly on the CPU")
            return 0
        _line(FAIL, "interpreter", (probe.stderr.strip().splitlines() or ["failed"])[-1])
        return 1


def _ncu_line(cuda: bool) -> None:
    ncu = find_ncu()
    if ncu is None:
        _line(WARN, "ncu", "not found: profile_ncu uses the no-counter fallback (set EGG_MCP_NCU to its path)")
    elif not cuda:
        _line(WARN, "ncu", f"{ncu} (no GPU: cannot read counters here)")
    else:
        probe = subprocess.run([ncu, "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv",
                                sys.executable, "-c", _NCU_PROBE], capture_output=True, text=True, timeout=180)
        text = probe.stdout + probe.stderr
        if probe.returncode == 0 and "gpu__time_duration" in text:
            _line(OK, "ncu", f"{ncu} reads hardware counters")
        else:
            reason = "ERR_NVGPUCTRPERM (no permission for counters)" if "ERR_NVGPUCTRPERM" in text else \
                (text.strip().splitlines() or ["failed"])[-1][:160]
            _line(WARN, "ncu", f"{ncu} cannot read counters: {reason}; profile_ncu falls back")


def _workspace_lines(config: ServerConfig, start_empty: bool) -> int:
    try:
        config.workspace.mkdir(parents=True, exist_ok=True)
        probe_file = config.workspace / ".doctor"
        probe_file.write_text("ok")
        probe_file.unlink()
        _line(OK, "workspace", str(config.workspace))
    except OSError as exc:
        _line(FAIL, "workspace", f"{config.workspace} not writable: {exc}; pass --workspace")
        return 1
    from egg_mcp.workspace.health import workspace_health

    failures = 0
    for status, what, detail in workspace_health(config.workspace, start_empty=start_empty,
                                                 scratch=config.scratch_dir()):
        _line({"ok": OK, "warn": WARN, "fail": FAIL}[status], what, detail)
        failures += status == "fail"
    return failures


def _kernelbench_line(config: ServerConfig) -> int:
    kb = config.kernelbench_dir
    if kb is None:
        _line(WARN, "KernelBench", "not configured (--kernelbench-dir): ids like level1/23 are unavailable")
    elif (kb / "KernelBench").is_dir() or (kb / "level1").is_dir():
        _line(OK, "KernelBench", str(kb))
    else:
        _line(FAIL, "KernelBench", f"{kb} has no KernelBench/level1 folder")
        return 1
    return 0
