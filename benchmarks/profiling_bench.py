"""Wall time of profile_candidate vs a bare ncu run with the same metrics on the same program.

    python benchmarks/profiling_bench.py OUT.json [--kinds memory_bound] [--repeats 2]

Targets (issue 4): profile_candidate <= 1.2x the bare ncu run, and <= 12 s for a full report of one
kernel. "Bare" = the identical ncu command line wrapping the same profiling target and payload, one
engine job (WorkerEvaluator.run_job) timed around it; "profile" = profile_candidate through the engine
(parse, classify, report included). Runs alternate (bare, profile, bare, ...) after
one untimed warm-up so the Triton cache is equally warm for both. About 1 minute per kind.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # egg_mcp and benchmarks.engine_jobs

from egg_mcp.contract import EvalOptions  # noqa: E402
from egg_mcp.profiling import ncu_command, profile_job  # noqa: E402
from benchmarks.engine_jobs import evaluator, run_job  # noqa: E402
from egg_mcp.profiling.metrics import metrics_for_stage  # noqa: E402
from egg_mcp.stages import Stage  # noqa: E402


def _kinds():
    spec = importlib.util.spec_from_file_location("profiling_kernels", ROOT / "benchmarks" / "profiling_kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.KINDS


def bare_ncu(ncu: str, info: dict, metrics: list[str]) -> dict:
    options = EvalOptions(dtype=info["dtype"])
    payload = ncu_command.build_payload(info["reference"], info["candidate"], options, device="cuda", profile=True,
                                        timing_iters=ncu_command.TIMING_ITERS_UNDER_NCU)
    tmp = Path(tempfile.mkdtemp(prefix="egg-bench-"))
    names = ncu_command.triton_kernel_names(info["candidate"])
    argv = ncu_command.ncu_argv(ncu, metrics, ncu_command.kernel_filter(names), str(tmp / "ncu.csv"))
    outcome, wall = run_job(ncu_command.TARGET, payload, wrapper_argv=argv, timeout_s=300)
    return {"wall_s": wall, "exit_code": outcome.exit_code, "csv_bytes": (tmp / "ncu.csv").stat().st_size
            if (tmp / "ncu.csv").exists() else 0}


def profiled(info: dict) -> dict:
    t0 = time.perf_counter()
    report = asyncio.run(_profile(info))
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "report_wall_s": report.wall_s, "ncu_job_wall_s": report.ncu_wall_s,
            "source": report.source, "metrics_rejected": report.metrics_rejected, "summary": report.summary,
            "classification": [k.classification.bound for k in report.kernels]}


async def _profile(info: dict):
    ev = evaluator()
    try:
        return await profile_job.profile_candidate(
            ev, reference_source=info["reference"], candidate_source=info["candidate"],
        options=EvalOptions(dtype=info["dtype"]), stage=Stage(info["stage"]), gpu=None, flops=info["flops"],
        min_bytes=info["min_bytes"], timeout_s=300)
    finally:
        await ev.aclose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_json")
    parser.add_argument("--kinds", default="memory_bound")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    ncu = ncu_command.find_ncu()
    if ncu is None:
        print("ncu not found: set EGG_MCP_NCU or put Nsight Compute on PATH", file=sys.stderr)
        return 2
    kinds = _kinds()
    results: dict = {"ncu": ncu, "repeats": args.repeats, "kinds": {}}
    for kind in [k for k in args.kinds.split(",") if k]:
        info = kinds[kind]
        print(f"[{kind}] warm-up ...", flush=True)
        warm = profiled(info)  # compiles into the Triton cache; also tells us which metrics the ncu rejects
        metrics = [m for m in metrics_for_stage(Stage(info["stage"])) if m not in warm["metrics_rejected"]]
        bare, prof = [], []
        for _ in range(args.repeats):
            bare.append(bare_ncu(ncu, info, metrics))
            prof.append(profiled(info))
        bare_med = statistics.median(b["wall_s"] for b in bare)
        prof_med = statistics.median(p["wall_s"] for p in prof)
        entry = {
            "stage": info["stage"], "metrics": len(metrics), "bare_ncu": bare, "profile_candidate": prof,
            "bare_median_s": round(bare_med, 3), "profile_median_s": round(prof_med, 3),
            "ratio": round(prof_med / bare_med, 3), "meets_1_2x": prof_med <= 1.2 * bare_med,
            "meets_12s": prof_med <= 12.0, "warmup": warm,
        }
        results["kinds"][kind] = entry
        print(f"[{kind}] bare {bare_med:.2f} s, profile_candidate {prof_med:.2f} s, ratio {entry['ratio']}", flush=True)
    Path(args.out_json).write_text(json.dumps(results, indent=1))
    print(f"wrote {args.out_json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
