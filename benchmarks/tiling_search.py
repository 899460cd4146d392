"""Does the tiling model rank configs the way the GPU does? (issues 14 + 18; `run.py tiling_search`)

    python benchmarks/tiling_search.py OUT_DIR [--quick] [--cases a,b] [--max-wall-s 225] [--smoke]

For the ten tiling cases (benchmarks/tiling_kernels, two shapes each) and the multi-kernel cases (KernelBench
level2/76 GEMM + bias + ReLU, and level3/43 causal attention with its qkv and output projections, both
fp32 at 1e-4 with egg-mcp's tf32x3 kernels, benchmarks/problems/kernelbench), each case:
  1. the model ranks the TUNING_SPACE (each kernel launch priced with its own dims: the multi-kernel
     cases are probed on the meta device first, as propose_tiling does);
  2. a fixed set is measured in one engine job through timing.GpuTimer (verify's timer): the model's top
     TOP configs, a seeded uniform sample of SAMPLE more feasible ones, and the source's own config;
  3. reported: the model's pick (its top-1) vs the measured best of the set, the gain of the pick over
     the source's config, and Spearman's rho of predicted vs measured time over the correct configs.
Overall: the per-case rhos (median, mean, how many >= 0.7). Writes OUT_DIR/tiling_search.json and .md.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from egg_mcp.contract import default_tolerance  # noqa: E402
from egg_mcp.hardware import GPU_TABLE  # noqa: E402
from egg_mcp.tiling.dims import normalize_dims  # noqa: E402
from egg_mcp.tiling.kernel_calls import kernel_calls, spearman  # noqa: E402
from egg_mcp.tiling.model import estimate_all  # noqa: E402
from egg_mcp.tiling.plan import config_key  # noqa: E402
from egg_mcp.tiling.rewrite import apply_config  # noqa: E402
from egg_mcp.tiling.space import current_config, enumerate_configs, extract_space  # noqa: E402
from tiling_bench import CASES as TILING_CASES, KERNELS, SMOKE_SIZES  # noqa: E402

KB = REPO / "benchmarks" / "problems" / "kernelbench"
MULTI_CASES = {  # name: (reference file, candidate file, kind, dtype, size overrides, task dims)
    "kb76_gemm_epilogue": ("76_Gemm_Add_ReLU.py", "gemm_add_relu_triton.py", "gemm", "float32", {},
                           {"M": 1024, "N": 8192, "K": 8192}),
    "kb43_attention_block": ("43_MinGPTCausalAttention.py", "mingpt_attention_triton.py", "gemm", "float32",
                             {"batch_size": 16}, {"M": 8192, "N": 2304, "K": 768}),
}
SMOKE_MULTI = {"kb76_gemm_epilogue": {"batch_size": 33, "in_features": 64, "out_features": 48},
               "kb43_attention_block": {"batch_size": 2, "seq_len": 40, "n_embd": 48, "n_head": 2, "max_seqlen": 64}}
TOP, SAMPLE = 6, 10
QUICK_TOP, QUICK_SAMPLE = 4, 6
MEASURE = "egg_mcp.tiling.measure:measure_configs"
PROBE = "egg_mcp.tiling.launches:probe_launches"
RHO_TARGET = 0.7
QUICK_CASES = ("gemm_a", "softmax_a", "layernorm_a", "rowsum_a", "biasgelu_b", *MULTI_CASES)
"""--quick: one shape per tiling kernel plus both multi-kernel cases (each case costs a worker start and a
cold compile of its configs, ~15 s, before any timing)."""


def case_inputs(name: str, smoke: bool) -> dict:
    if name in MULTI_CASES:
        ref, cand, kind, dtype, overrides, dims = MULTI_CASES[name]
        reference, candidate = (KB / ref).read_text(), (KB / cand).read_text()
        if smoke:
            overrides = SMOKE_MULTI[name]
    else:
        file, kind, dtype, overrides, dims = TILING_CASES[name]
        reference = candidate = (KERNELS / f"{file}.py").read_text()
        if smoke:
            dtype, overrides = "float32", SMOKE_SIZES[file]
    return {"reference": reference, "candidate": candidate, "kind": kind, "dtype": dtype, "overrides": overrides,
            "dims": dims}


def pick_configs(estimates, space, top: int, sample: int, seed: int = 0) -> list[dict]:
    """The model's top `top`, `sample` more feasible ones drawn uniformly (seeded), and the source's own."""
    feasible = [e.config.values for e in estimates if e.feasible]
    chosen = feasible[:top]
    rest = feasible[top:]
    chosen += random.Random(seed).sample(rest, min(sample, len(rest)))
    own = current_config(space)
    if own and config_key(own) not in {config_key(c) for c in chosen}:
        chosen.append(own)
    return chosen


def run_case(name: str, args, run_job, deadline: float) -> dict:
    inp = case_inputs(name, args.smoke)
    record: dict = {"case": name, "kind": inp["kind"], "dtype": inp["dtype"], "sizes": inp["overrides"]}
    t0 = time.perf_counter()
    canonical = normalize_dims(inp["kind"], inp["dims"])
    space = extract_space(inp["candidate"], kind=inp["kind"], dims=canonical)
    launches = None
    if name in MULTI_CASES:
        probe = run_job(PROBE, {"reference_source": inp["reference"], "candidate_source": inp["candidate"],
                                   "dtype": inp["dtype"], "size_overrides": inp["overrides"]}, 120, False)
        launches = (probe.result or {}).get("launches") if probe.ok else None
        record["probe_error"] = None if launches else (probe.result or {}).get("error") or "probe job failed"
    space.calls, notes = kernel_calls(space, inp["kind"], canonical, launches)
    record["kernels"] = [{"kernel": c.kernel, "kind": c.kind, "dims": c.dims, "dims_from": c.dims_from,
                          "precision": c.precision} for c in space.calls]
    record["kernel_notes"] = notes
    configs, total, _ = enumerate_configs(space)
    estimates = estimate_all(configs, space, gpu=GPU_TABLE["H200"], dims=canonical, kind=inp["kind"],
                             dtype=inp["dtype"])
    predicted = {config_key(e.config.values): e.predicted_ms for e in estimates}
    top, sample = (QUICK_TOP, QUICK_SAMPLE) if args.quick else (TOP, SAMPLE)
    if args.smoke:
        top, sample = 2, 1
    chosen = pick_configs(estimates, space, top, sample)
    record.update(space_size=total, feasible=sum(e.feasible for e in estimates), measured_configs=len(chosen),
                  analytic_s=round(time.perf_counter() - t0, 2))
    tol = default_tolerance(inp["dtype"])
    remaining = deadline - time.perf_counter()
    payload = {"reference_source": inp["reference"], "dtype": inp["dtype"], "size_overrides": inp["overrides"],
               "atol": tol.atol, "rtol": tol.rtol, "device": "interpreter" if args.smoke else "cuda",
               "compile_workers": 0 if args.smoke else 14, "timing_trials": args.timing_trials,
               "time_budget_s": max(10.0, remaining - 15),
               "candidates": [{"config": c, "source": apply_config(inp["candidate"], c)} for c in chosen]}
    outcome = run_job(MEASURE, payload, max(30.0, remaining), True)
    if not outcome.ok or not outcome.result:
        record["error"] = (outcome.error.message if outcome.error else "no result")[:1500]
        return record
    rows = []
    for r in outcome.result["results"]:
        key = config_key(r["config"]["values"])
        rows.append({"config": r["config"]["values"], "predicted_ms": predicted.get(key),
                     "measured_ms": r["median_ms"] if r["correct"] else None, "error_kind": r.get("error_kind"),
                     "timing_cv": r.get("timing_cv")})
    record["configs"] = rows
    good = [r for r in rows if r["measured_ms"] is not None and r["predicted_ms"] is not None]
    record["correct"] = len(good)
    if not good:
        record["error"] = "no measured config was correct: " + "; ".join(
            {str(r["error_kind"]) for r in rows})
        return record
    rho = spearman([r["predicted_ms"] for r in good], [r["measured_ms"] for r in good])
    pick = min(good, key=lambda r: r["predicted_ms"])
    best = min(good, key=lambda r: r["measured_ms"])
    own = next((r for r in rows if r["measured_ms"] is not None
                and config_key(r["config"]) == config_key(current_config(space))), None)
    record.update(
        rho=rho, model_pick=pick["config"], model_pick_ms=pick["measured_ms"], best=best["config"],
        best_ms=best["measured_ms"], pick_over_best=best["measured_ms"] / pick["measured_ms"],
        source_ms=own["measured_ms"] if own else None,
        gain_over_source=(own["measured_ms"] / pick["measured_ms"]) if own else None,
        best_gain_over_source=(own["measured_ms"] / best["measured_ms"]) if own else None,
        timing_method=outcome.result["results"][0].get("timing_method"), measure_wall_s=outcome.result.get("wall_s"))
    return record


def summarize(records: list[dict], wall: float) -> dict:
    rhos = [r["rho"] for r in records if r.get("rho") is not None]
    return {
        "cases": len(records), "with_rho": len(rhos),
        "rho_median": statistics.median(rhos) if rhos else None, "rho_mean": statistics.fmean(rhos) if rhos else None,
        "cases_rho_ge_target": sum(r >= RHO_TARGET for r in rhos), "rho_target": RHO_TARGET,
        "pick_over_best_median": statistics.median([r["pick_over_best"] for r in records if "pick_over_best" in r])
        if any("pick_over_best" in r for r in records) else None,
        "wall_s": round(wall, 1),
    }


def _f(x, spec=".3f"):
    return "—" if x is None else format(x, spec) if isinstance(x, (int, float)) else str(x)


def write(out: Path, records: list[dict], started: float) -> dict:
    summary = summarize(records, time.perf_counter() - started)
    (out / "tiling_search.json").write_text(json.dumps({"summary": summary, "cases": records}, indent=1))
    lines = ["# tiling model: predicted vs measured rank (GpuTimer, one job per case)", "",
             f"rho (Spearman, per case): median {_f(summary['rho_median'])}, mean {_f(summary['rho_mean'])}, "
             f"{summary['cases_rho_ge_target']}/{summary['with_rho']} cases >= {RHO_TARGET}; model pick / measured best "
             f"(median) {_f(summary['pick_over_best_median'])}; wall {summary['wall_s']} s", "",
             "| case | kernels | measured (correct) | rho | model pick ms | best ms | best/pick | pick gain over source | error |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        kernels = "; ".join(f"{k['kernel']} {k['kind']} {k['dims']}" for k in r.get("kernels", []))
        lines.append(f"| {r['case']} | {kernels} | {r.get('measured_configs', '—')} ({r.get('correct', '—')}) | "
                     f"{_f(r.get('rho'))} | {_f(r.get('model_pick_ms'), '.4f')} | {_f(r.get('best_ms'), '.4f')} | "
                     f"{_f(r.get('pick_over_best'))} | {_f(r.get('gain_over_source'))} | {(r.get('error') or '')[:100]} |")
    (out / "tiling_search.md").write_text("\n".join(lines) + "\n")
    return summary


def engine_run_job(target, payload, timeout_s, uses_gpu):
    from benchmarks.engine_jobs import run_job

    outcome, _ = run_job(target, payload, timeout_s=timeout_s, uses_gpu=uses_gpu)
    return outcome


def main(argv: list[str] | None = None, run_job=engine_run_job) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--cases", default=None, help="default: all twelve (--quick: QUICK_CASES)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_TOP}+{QUICK_SAMPLE} configs per case, 10 timed runs")
    parser.add_argument("--max-wall-s", type=float, default=225.0)
    parser.add_argument("--timing-trials", type=int, default=None)
    parser.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny shapes (plumbing only)")
    args = parser.parse_args(argv)
    if args.timing_trials is None:
        args.timing_trials = 10 if args.quick else 30  # the ranking needs ~1 % precision, not verify's 0.1 %
    cases = args.cases or ",".join(QUICK_CASES if args.quick else [*TILING_CASES, *MULTI_CASES])
    names = [c for c in cases.split(",") if c]
    unknown = [c for c in names if c not in TILING_CASES and c not in MULTI_CASES]
    if unknown:
        parser.error(f"unknown cases {unknown}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    deadline = started + args.max_wall_s
    records = []
    for i, name in enumerate(names):
        left = deadline - time.perf_counter()
        if left < 10:
            records.append({"case": name, "error": "skipped: wall-time budget"})
            continue
        share = left / (len(names) - i)  # each remaining case gets an equal share of what is left
        try:
            record = run_case(name, args, run_job, time.perf_counter() + max(share, 20.0))
        except Exception as exc:  # noqa: BLE001 - one broken case must not lose the others
            record = {"case": name, "error": f"{type(exc).__name__}: {exc}"[:1500]}
        records.append(record)
        print(json.dumps({k: record.get(k) for k in ("case", "rho", "pick_over_best", "gain_over_source", "error")}),
              flush=True)
        write(args.out_dir, records, started)
    summary = write(args.out_dir, records, started)
    print((args.out_dir / "tiling_search.md").read_text())
    return 0 if summary["with_rho"] else 1


if __name__ == "__main__":
    sys.exit(main())
