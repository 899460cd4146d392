"""Capture real Nsight Compute CSV logs of the profiler's test kernels (run ONCE on the H200).

    python benchmarks/profiling_capture_fixtures.py OUT_DIR [--kinds memory_bound,compute_bound,...]

Writes, for each kind of benchmarks/profiling_kernels.py, OUT_DIR/<kind>.csv (ncu's raw-page CSV
log exactly as written with --log-file, every metric of the stage table), OUT_DIR/<kind>.result.json
(the worker target's result: Triton metadata, event timing) and OUT_DIR/manifest.json (what each
kernel is, the ncu command, rejected metric names, ncu version, GPU). One extra details-page log
(uncoalesced.details.csv) records ncu's own rule hints. Copy OUT_DIR to tests/data/ncu/.
Takes about 1-2 minutes (each kind: one Python start, one compile, ncu start-up and replay).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from egg_mcp.contract import EvalOptions  # noqa: E402
from egg_mcp.profiling import ncu_command  # noqa: E402
from benchmarks.engine_jobs import run_job  # noqa: E402
from egg_mcp.profiling.metrics import ALL_METRICS  # noqa: E402
from egg_mcp.profiling.ncu_csv import counter_access_problem, invalid_metrics, parse_ncu_output  # noqa: E402


def _kinds():
    spec = importlib.util.spec_from_file_location("profiling_kernels", ROOT / "benchmarks" / "profiling_kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.KINDS


class _Proc:
    """What the capture reads of one engine job wrapped in ncu (returncode, stdout, stderr, the result)."""

    def __init__(self, outcome):
        self.returncode, self.stdout, self.stderr = outcome.exit_code, outcome.stdout_tail, outcome.stderr_tail
        self.result = {"result": outcome.result} if outcome.ok else {
            "error": outcome.error.model_dump() if outcome.error else "no result"}


def _run(ncu_argv: list[str], payload: dict, timeout: float) -> tuple[_Proc | None, float]:
    """The profiling target as an engine job (WorkerEvaluator.run_job) under the ncu command line `ncu_argv`."""
    outcome, wall = run_job(ncu_command.TARGET, payload, wrapper_argv=ncu_argv, timeout_s=timeout)
    return (None if outcome.timed_out else _Proc(outcome)), wall


def capture(kind: str, info: dict, ncu: str, out: Path, metrics: list[str], rejected: list[str]) -> dict:
    names = ncu_command.triton_kernel_names(info["candidate"])
    payload = ncu_command.build_payload(info["reference"], info["candidate"], EvalOptions(dtype=info["dtype"]),
                                        device="cuda", profile=True, timing_iters=ncu_command.TIMING_ITERS_UNDER_NCU)
    tmp = Path(tempfile.mkdtemp(prefix=f"egg-capture-{kind}-"))
    log_path = tmp / "ncu.csv"
    entry: dict = {k: info[k] for k in ("description", "dtype", "stage", "flops", "min_bytes", "expect")}
    for attempt in range(3):
        argv = ncu_command.ncu_argv(ncu, metrics, ncu_command.kernel_filter(names), str(log_path))
        proc, wall = _run(argv, payload, timeout=240)
        text = log_path.read_text(errors="replace") if log_path.exists() else ""
        if proc is None:
            entry["error"] = "timed out after 240 s"
            break
        bad = invalid_metrics(text + proc.stdout + proc.stderr, metrics)
        if bad and not parse_ncu_output(text).launches:
            rejected.extend(bad)
            metrics[:] = [m for m in metrics if m not in bad]
            print(f"[{kind}] ncu rejected {bad}; retrying", flush=True)
            continue
        entry.update(ncu_command=argv[: argv.index("--") + 1], ncu_wall_s=round(wall, 2), exit_code=proc.returncode)
        problem = counter_access_problem(text + proc.stderr)
        if problem:
            entry["error"] = problem
        if text:
            (out / f"{kind}.csv").write_text(text)
        (out / f"{kind}.result.json").write_text(json.dumps(proc.result, indent=1))
        entry["target_error"] = proc.result.get("error")
        if proc.returncode != 0:
            entry["stderr_tail"] = proc.stderr[-3000:]
        entry["launches_in_csv"] = len(parse_ncu_output(text).launches)
        break
    return entry


def capture_details(info: dict, ncu: str, out: Path) -> dict:
    """One details-page log with ncu's rule hints (for the details parser's test)."""
    names = ncu_command.triton_kernel_names(info["candidate"])
    payload = ncu_command.build_payload(info["reference"], info["candidate"], EvalOptions(dtype=info["dtype"]),
                                        device="cuda", profile=True, timing_iters=0)
    tmp = Path(tempfile.mkdtemp(prefix="egg-capture-details-"))
    log_path = tmp / "ncu.csv"
    argv = [ncu, "--csv", "--page", "details", "--section", "SpeedOfLight", "--section", "Occupancy",
            "--section", "LaunchStats", "--section", "MemoryWorkloadAnalysis", "--clock-control", "none",
            "--profile-from-start", "off", "-k", ncu_command.kernel_filter(names), "--launch-count", "1",
            "--log-file", str(log_path), "--"]
    proc, wall = _run(argv, payload, timeout=240)
    if log_path.exists():
        (out / "uncoalesced.details.csv").write_text(log_path.read_text(errors="replace"))
    return {"ncu_command": argv, "wall_s": round(wall, 2), "exit_code": None if proc is None else proc.returncode}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--kinds", default="", help="comma-separated subset of the kinds (default: all)")
    args = parser.parse_args()
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ncu = ncu_command.find_ncu()
    if ncu is None:
        print("ncu not found: set EGG_MCP_NCU or put Nsight Compute on PATH", file=sys.stderr)
        return 2
    version = subprocess.run([ncu, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    kinds = _kinds()
    chosen = [k for k in args.kinds.split(",") if k] or list(kinds)
    metrics = list(ALL_METRICS)
    rejected: list[str] = []
    manifest = {"ncu": ncu, "ncu_version": version[-1] if version else None, "metrics": metrics,
                "rejected_metrics": rejected, "kinds": {}}
    try:
        import torch

        manifest["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        manifest["torch"] = torch.__version__
        import triton

        manifest["triton"] = triton.__version__
    except Exception as exc:  # the manifest is still useful without these
        manifest["gpu_error"] = repr(exc)
    t0 = time.perf_counter()
    for kind in chosen:
        print(f"[{kind}] capturing ...", flush=True)
        manifest["kinds"][kind] = capture(kind, kinds[kind], ncu, out, metrics, rejected)
        print(f"[{kind}] {json.dumps({k: v for k, v in manifest['kinds'][kind].items() if k in ('ncu_wall_s', 'launches_in_csv', 'error', 'exit_code')})}", flush=True)
    if "uncoalesced" in chosen:
        manifest["details"] = capture_details(kinds["uncoalesced"], ncu, out)
    manifest["metrics"] = metrics  # after dropping rejected names
    manifest["total_s"] = round(time.perf_counter() - t0, 1)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(f"wrote {out}/manifest.json in {manifest['total_s']} s; rejected metrics: {rejected or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
