"""GPU benchmark of propose_tiling against exhaustive measurement (run once on the H200).

    python benchmarks/tiling_bench.py OUT_DIR [--cases gemm_a,softmax_b,...] [--autotune gemm_a,softmax_a]
                                              [--max-wall-s 540] [--workers 14]

For each case (five kernels in benchmarks/tiling_kernels/, two shapes each):
  1. the analytic model ranks the whole TUNING_SPACE (feasibility + predicted time);
  2. every config is compiled (14 processes, one shared Triton cache), checked and timed once
     (exhaustive), in one job of the real engine, timed by GpuTimer (verify's timer), with the compiler's
     registers / spills / shared memory;
  3. the search is replayed against those timings: best of the configs it would measure within 8
     and 16 trials vs the exhaustive best (and the plain top-8 / top-16 of the ranking);
  4. the feasibility model is compared with the compiler on every config (out-of-resources for
     shared memory, spills from the compiled metadata);
  5. propose_tiling runs for real, cold (fresh cache, fresh worker), for its wall time; for the cases
     named by --autotune, triton.autotune over the full space runs cold too (wall-time ratio).
Writes OUT_DIR/tiling_bench.json and OUT_DIR/tiling_bench.md, rewritten after every case.
The parent process never initialises CUDA: every GPU step runs in a child process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from egg_mcp.contract import EvalOptions, ErrorReport, JobOutcome, default_tolerance  # noqa: E402
from egg_mcp.hardware import GPU_TABLE  # noqa: E402  (the H200 datasheet leads: the model's target)
from egg_mcp.tiling.dims import normalize_dims  # noqa: E402
from egg_mcp.tiling.model import estimate_all  # noqa: E402
from egg_mcp.tiling.plan import config_key, simulate_search  # noqa: E402
from egg_mcp.tiling.rewrite import apply_config  # noqa: E402
from egg_mcp.tiling.search import propose_tiling  # noqa: E402
from egg_mcp.tiling.space import enumerate_configs, extract_space  # noqa: E402

KERNELS = REPO / "benchmarks" / "tiling_kernels"
CASES = {
    "gemm_a": ("gemm_bias_relu", "gemm", "bfloat16",
               {"batch_size": 4096, "in_features": 4096, "out_features": 4096}, {"M": 4096, "N": 4096, "K": 4096}),
    "gemm_b": ("gemm_bias_relu", "gemm", "bfloat16",
               {"batch_size": 16384, "in_features": 2048, "out_features": 1024}, {"M": 16384, "N": 1024, "K": 2048}),
    "softmax_a": ("softmax", "softmax", "float32", {"batch_size": 4096, "dim": 8192}, {"n_rows": 4096, "n_cols": 8192}),
    "softmax_b": ("softmax", "softmax", "float32", {"batch_size": 32768, "dim": 1024}, {"n_rows": 32768, "n_cols": 1024}),
    "layernorm_a": ("layernorm", "norm", "bfloat16", {"batch_size": 16384, "hidden": 2048},
                    {"n_rows": 16384, "n_cols": 2048}),
    "layernorm_b": ("layernorm", "norm", "bfloat16", {"batch_size": 2048, "hidden": 8192},
                    {"n_rows": 2048, "n_cols": 8192}),
    "rowsum_a": ("row_sum", "reduction", "float32", {"batch_size": 8192, "dim": 8192}, {"n_rows": 8192, "n_cols": 8192}),
    "rowsum_b": ("row_sum", "reduction", "float32", {"batch_size": 1024, "dim": 65536},
                 {"n_rows": 1024, "n_cols": 65536}),
    "biasgelu_a": ("bias_gelu", "elementwise", "bfloat16", {"batch_size": 8192, "hidden": 8192},
                   {"n_rows": 8192, "n_cols": 8192}),
    "biasgelu_b": ("bias_gelu", "elementwise", "bfloat16", {"batch_size": 65536, "hidden": 768},
                   {"n_rows": 65536, "n_cols": 768}),
}
DEFAULT_AUTOTUNE = "gemm_a,softmax_a"
# --smoke: tiny fp32 shapes on the CPU interpreter, a few configs per case (checks the plumbing only)
SMOKE_SIZES = {
    "gemm_bias_relu": {"batch_size": 70, "in_features": 96, "out_features": 80},
    "softmax": {"batch_size": 5, "dim": 300}, "layernorm": {"batch_size": 5, "hidden": 300},
    "row_sum": {"batch_size": 5, "dim": 300}, "bias_gelu": {"batch_size": 5, "hidden": 300},
}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_measure_job(payload: dict, timeout_s: float) -> tuple[dict | None, str | None, float]:
    """measure_configs as one job of the real engine (WorkerEvaluator.run_job, a GPU worker; the CPU
    interpreter for --smoke), timed through the project's GpuTimer inside it."""
    from benchmarks.engine_jobs import run_job

    outcome, wall = run_job(MEASURE_TARGET, payload, timeout_s=timeout_s, uses_gpu=True)
    if outcome.timed_out:
        return None, f"timed out after {timeout_s:.0f} s", wall
    if not outcome.ok or outcome.result is None:
        why = outcome.error.message if outcome.error else f"exit {outcome.exit_code}"
        return None, f"{why}\n{outcome.stderr_tail[-2000:]}", wall
    return outcome.result, None, wall


MEASURE_TARGET = "egg_mcp.tiling.measure:measure_configs"


class LocalEvaluator:
    """The real engine for propose_tiling, as the server's evaluator serves it: the measuring job here, with the
    device pinned on each job (each job's runner starts with its own empty Triton cache inside its sandbox), and the
    launch probe and verify's path (`evaluate`: the re-verification of a winner) through one WorkerEvaluator.
    Without `evaluate` a winner's re-verification fails and nothing is ever recommended."""

    def __init__(self, device: str = "cuda", timing_trials: int | None = None):
        self.device = device
        self.timing_trials = timing_trials
        self._engine = None

    def has_gpu(self) -> bool:
        return True

    def engine(self):
        if self._engine is None:
            from egg_mcp.evaluation.engine import WorkerEvaluator

            self._engine = WorkerEvaluator(scratch_dir=Path(tempfile.mkdtemp(prefix="egg-tiling-bench-")),
                                           force_interpreter=self.device == "interpreter", spare_workers=0)
        return self._engine

    async def run_job(self, target, payload, *, timeout_s, uses_gpu, wrapper_argv=None) -> JobOutcome:
        if target != MEASURE_TARGET:
            return await self.engine().run_job(target, payload, timeout_s=timeout_s, uses_gpu=uses_gpu,
                                               wrapper_argv=wrapper_argv)
        payload = dict(payload, device=self.device)
        if self.timing_trials:
            payload["timing_trials"] = self.timing_trials
        result, error, wall = await asyncio.to_thread(run_measure_job, payload, timeout_s)
        if error:
            return JobOutcome(ok=False, error=ErrorReport(kind="job", message=error[:2000]), wall_s=wall)
        return JobOutcome(ok=True, result=result, wall_s=wall)

    async def evaluate(self, reference_source, candidate_source, options, progress=None):
        options = options.model_copy(update={"device": "interpreter" if self.device == "interpreter" else "cuda"})
        return await self.engine().evaluate(reference_source, candidate_source, options, progress)

    async def aclose(self) -> None:
        if self._engine is not None:
            await self._engine.aclose()
            self._engine = None


# ------------------------------------------------------------------------------- autotune worker


def autotune_worker(payload_path: str, result_path: str) -> None:
    """Child: triton.autotune over the whole space, cold cache; time the first call."""
    with open(payload_path) as f:
        job = json.load(f)
    os.environ["TRITON_CACHE_DIR"] = job["cache_dir"]
    import importlib.util

    import torch
    import triton

    spec = importlib.util.spec_from_file_location("tiling_bench_case", job["path"])
    module = importlib.util.module_from_spec(spec)
    sys.modules["tiling_bench_case"] = module
    spec.loader.exec_module(module)
    for name, value in job["size_overrides"].items():
        setattr(module, name, value)
    dtype = getattr(torch, job["dtype"])
    configs = []
    for values in job["configs"]:
        meta = {k: v for k, v in values.items() if k not in ("NUM_WARPS", "NUM_STAGES")}
        configs.append(triton.Config(meta, num_warps=values.get("NUM_WARPS", 4), num_stages=values.get("NUM_STAGES", 3)))
    tuned = triton.autotune(configs=configs, key=module.AUTOTUNE_KEY)(getattr(module, module.AUTOTUNE_KERNEL))
    torch.manual_seed(0)
    init = module.get_init_inputs()
    inputs = [x.cuda().to(dtype) if x.is_floating_point() else x.cuda() for x in module.get_inputs()]
    model = module.ModelNew(*init).cuda().to(dtype)
    model.kernel, model.meta = tuned, {}
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.no_grad():
        model(*inputs)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    best = tuned.best_config
    chosen = dict(best.kwargs)
    chosen["NUM_WARPS"] = best.num_warps
    if any("NUM_STAGES" in c for c in job["configs"]):
        chosen["NUM_STAGES"] = best.num_stages
    with open(result_path, "w") as f:
        json.dump({"wall_s": wall, "chosen": chosen}, f)


def run_autotune(path: Path, case: tuple, configs: list[dict], cache_dir: str, timeout_s: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="tiling_at_") as tmp:
        p_in, p_out = os.path.join(tmp, "in.json"), os.path.join(tmp, "out.json")
        with open(p_in, "w") as f:
            json.dump({"path": str(path), "size_overrides": case[3], "dtype": case[2], "configs": configs,
                       "cache_dir": cache_dir}, f)
        try:
            proc = subprocess.run([sys.executable, __file__, "--autotune-worker", p_in, p_out], env=_env(),
                                  capture_output=True, text=True, timeout=timeout_s, cwd=str(REPO))
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout_s:.0f} s"}
        if not os.path.exists(p_out):
            return {"error": f"exit {proc.returncode}: {proc.stderr[-1500:]}"}
        with open(p_out) as f:
            return json.load(f)


# ------------------------------------------------------------------------------------ analysis


def _best_of(configs: list[dict], oracle: dict) -> float | None:
    times = [oracle[config_key(c)] for c in configs if oracle.get(config_key(c)) is not None]
    return min(times) if times else None


def compiler_facts(r: dict) -> dict:
    """What the compiler said about one measured config: the largest registers / spills / shared
    memory over its kernels, and whether it failed for lack of shared memory. `spills` is None when
    the config has no spill verdict (it did not compile)."""
    kernels = r.get("kernels") or []
    oor_smem = r.get("error_kind") == "out_of_resources" and "shared" in (r.get("error") or "")
    spills = max((k.get("spills") or 0 for k in kernels), default=None)
    return {
        "compiled": bool(kernels) or oor_smem, "oor_smem": oor_smem,
        "registers": max((k.get("registers") or 0 for k in kernels), default=None),
        "spills": None if oor_smem else spills,
        "shared_mem_bytes": max((k.get("shared_mem_bytes") or 0 for k in kernels), default=None),
    }


def _agreement(estimates: dict, results: list[dict], nbytes: int) -> dict:
    smem_agree = spill_agree = smem_total = spill_total = 0
    disagreements = []
    smem_ratios = []
    for r in results:
        est = estimates[config_key(r["config"]["values"])]
        facts = compiler_facts(r)
        if not facts["compiled"]:
            continue
        model_smem = "smem" in est.rules
        smem_total += 1
        smem_agree += model_smem == facts["oor_smem"]
        reported, spills = facts["shared_mem_bytes"], facts["spills"]
        if reported and est.smem_bytes:
            smem_ratios.append(reported / est.smem_bytes)
        spill_mismatch = False
        if spills is not None:  # a config that did not compile has no spill verdict
            spill_total += 1
            spill_mismatch = ("spill" in est.rules) != (spills > 0)
            spill_agree += not spill_mismatch
        if model_smem != facts["oor_smem"] or spill_mismatch:
            disagreements.append({
                "config": r["config"]["values"], "model_rules": est.rules, "predicted_smem": est.smem_bytes,
                "predicted_regs": est.regs_per_thread, "reported_smem": reported, "spills": spills,
                "registers": facts["registers"], "error": (r.get("error") or "")[:200],
            })
    return {
        "smem_checked": smem_total, "smem_agree": smem_agree, "spill_checked": spill_total, "spill_agree": spill_agree,
        "all_agree": smem_agree == smem_total and spill_agree == spill_total,
        "reported_over_predicted_smem": [min(smem_ratios), max(smem_ratios)] if smem_ratios else None,
        "disagreements": disagreements[:40],
    }


def run_case(name: str, args, out_dir: Path, deadline: float) -> dict:
    file, kind, dtype, overrides, dims = CASES[name]
    device = "interpreter" if args.smoke else "cuda"
    if args.smoke:
        dtype, overrides = "float32", SMOKE_SIZES[file]
    path = KERNELS / f"{file}.py"
    source = path.read_text()
    gpu = GPU_TABLE["H200"]
    record: dict = {"case": name, "kernel": file, "kind": kind, "dtype": dtype, "dims": dims}
    t0 = time.perf_counter()
    canonical = normalize_dims(kind, dims)
    space = extract_space(source, kind=kind, dims=canonical)
    configs, total, _ = enumerate_configs(space)
    estimates = estimate_all(configs, space, gpu=gpu, dims=canonical, kind=kind, dtype=dtype)
    record["analytic_s"] = time.perf_counter() - t0
    feasible = [e for e in estimates if e.feasible]
    record.update(space_size=total, feasible=len(feasible), pruned={})
    for e in estimates:
        for rule in e.rules:
            record["pruned"][rule] = record["pruned"].get(rule, 0) + 1
    tol = default_tolerance(dtype)
    if args.smoke:  # the model's top few and a few pruned ones, to exercise both paths
        configs = [e.config.values for e in feasible[:5]] + [e.config.values for e in estimates[-2:]]

    # exhaustive
    payload = {"reference_source": source, "dtype": dtype, "size_overrides": overrides, "atol": tol.atol,
               "rtol": tol.rtol, "device": device, "compile_workers": args.workers, "timing_trials": args.timing_trials,
               "time_budget_s": max(30.0, deadline - time.perf_counter() - 30),
               "candidates": [{"config": c, "source": apply_config(source, c)} for c in configs]}
    result, error, wall = run_measure_job(payload, timeout_s=max(60.0, deadline - time.perf_counter()))
    record["exhaustive_wall_s"] = wall
    if error:
        record["error"] = f"exhaustive measurement failed: {error[:3000]}"
        return record
    results = result["results"]
    record["exhaustive_compile_s"] = result["compile_wall_s"]
    record["compile_mode"] = result["compile_mode"]
    oracle = {config_key(r["config"]["values"]): (r["median_ms"] if r["correct"] else None) for r in results}
    correct = {k: v for k, v in oracle.items() if v is not None}
    record["measured_correct"] = len(correct)
    record["failures"] = {}
    for r in results:
        if not r["correct"]:
            record["failures"][r["error_kind"] or "?"] = record["failures"].get(r["error_kind"] or "?", 0) + 1
    if not correct:
        record["error"] = "no config was correct: " + "; ".join({(r.get("error") or "")[:300] for r in results[:5]})
        return record
    best_key = min(correct, key=correct.get)
    best = correct[best_key]
    record["exhaustive_best_ms"] = best
    record["exhaustive_best"] = dict(best_key)
    best_est = next(e for e in estimates if config_key(e.config.values) == best_key)
    record["exhaustive_best_predicted_rank"] = (
        next(i + 1 for i, e in enumerate(feasible) if config_key(e.config.values) == best_key) if best_est.feasible
        else f"pruned: {'; '.join(best_est.reasons)}")
    ranked = [(e.config.values, e.predicted_ms) for e in feasible]
    choices = {p.name: list(p.choices) for p in space.params if p.applicable}
    for k in (8, 16):
        order = simulate_search(ranked, choices, oracle, k)
        found = _best_of(order, oracle)
        record[f"search{k}_ratio"] = best / found if found else 0.0
        record[f"search{k}_best"] = dict(config_key(min((c for c in order if oracle.get(config_key(c))),
                                                        key=lambda c: oracle[config_key(c)]))) if found else None
        top = _best_of([c for c, _ in ranked[:k]], oracle)
        record[f"top{k}_ratio"] = best / top if top else 0.0
    sorted_times = sorted(correct.values())
    record["median_config_ratio"] = best / sorted_times[len(sorted_times) // 2]
    by_key = {config_key(e.config.values): e for e in estimates}
    record["agreement"] = _agreement(by_key, results, 2 if dtype != "float32" else 4)
    # every config's measurement and compiler verdict, so a later model can be re-scored offline exactly
    record["configs"] = [{
        "config": r["config"]["values"], "median_ms": r["median_ms"] if r["correct"] else None,
        "error_kind": r.get("error_kind"), **compiler_facts(r),
        "model_rules": by_key[config_key(r["config"]["values"])].rules,
    } for r in results]

    # propose_tiling for real, cold
    if args.no_search:
        record["search_error"] = "skipped: --no-search"
    elif time.perf_counter() < deadline - 60:
        options = EvalOptions(dtype=dtype, tolerance=tol, size_overrides=overrides)
        try:
            async def search(evaluator: LocalEvaluator):
                try:
                    return await propose_tiling(evaluator, reference_source=source, candidate_source=source,
                                                options=options, gpu=gpu, dims=dims, kind=kind,
                                                max_trials=3 if args.smoke else 8, time_budget_s=120.0)
                finally:
                    await evaluator.aclose()

            proposal = asyncio.run(search(LocalEvaluator(device, args.timing_trials)))
            rec = proposal.recommended.values if proposal.recommended else None
            record["search_wall_s"] = proposal.wall_s
            record["search_trials"] = proposal.trials_used
            record["search_note"] = proposal.note
            record["search_recommended"] = rec
            exhaustive_time = oracle.get(config_key(rec)) if rec else None
            record["search_real_ratio"] = best / exhaustive_time if exhaustive_time else None
        except Exception as exc:  # noqa: BLE001 - reported in the table
            record["search_error"] = f"{type(exc).__name__}: {exc}"[:1000]
    else:
        record["search_error"] = "skipped: wall-time budget"

    if name in args.autotune_cases and not args.smoke:
        if time.perf_counter() < deadline - 120:
            cache = tempfile.mkdtemp(prefix="tiling_autotune_cache_")
            try:
                at = run_autotune(path, CASES[name], configs, cache, timeout_s=max(30.0, deadline - time.perf_counter()))
            finally:
                shutil.rmtree(cache, ignore_errors=True)
            record["autotune"] = at
            if "wall_s" in at:
                chosen = oracle.get(config_key(at["chosen"]))
                record["autotune"]["ratio_vs_exhaustive"] = best / chosen if chosen else None
                if record.get("search_wall_s"):
                    record["autotune_over_search_wall"] = at["wall_s"] / record["search_wall_s"]
        else:
            record["autotune"] = {"error": "skipped: wall-time budget"}
    return record


def fmt(x, spec=".3f"):
    """A table cell: a number in `spec`, a dash for None, anything else as text."""
    return "—" if x is None else format(x, spec) if isinstance(x, (int, float)) else str(x)


def write_report(out_dir: Path, records: list[dict], started: float, args) -> None:
    done = [r for r in records if "search8_ratio" in r]
    summary = {
        "cases": len(records), "measured_cases": len(done),
        "frac_search8_ge_0.95": sum(r["search8_ratio"] >= 0.95 for r in done) / len(done) if done else None,
        "frac_search16_ge_0.98": sum(r["search16_ratio"] >= 0.98 for r in done) / len(done) if done else None,
        "frac_top8_ge_0.95": sum(r["top8_ratio"] >= 0.95 for r in done) / len(done) if done else None,
        "feasibility_agrees_on_all_cases": all(r["agreement"]["all_agree"] for r in done) if done else None,
        "wall_s": time.perf_counter() - started,
        "goal": ">= 95% of the exhaustive best within 8 measured configs on >= 80% of cases; >= 98% within 16",
    }
    (out_dir / "tiling_bench.json").write_text(json.dumps({"summary": summary, "cases": records}, indent=1))
    lines = [
        "# propose_tiling vs exhaustive measurement (H200)", "",
        f"cases measured: {len(done)}/{len(records)}; within 8 trials >= 95% of best: "
        f"{fmt(summary['frac_search8_ge_0.95'], '.0%')}; within 16 >= 98%: {fmt(summary['frac_search16_ge_0.98'], '.0%')}; "
        f"plain top-8 of the model >= 95%: {fmt(summary['frac_top8_ge_0.95'], '.0%')}; "
        f"feasibility model = compiler on every config: {summary['feasibility_agrees_on_all_cases']}; "
        f"run wall {summary['wall_s']:.0f} s", "",
        "| case | space | feasible | pruned | best ms (exhaustive) | best's predicted rank | search 8 | search 16 | "
        "top-8 | top-16 | median cfg | smem agree | spill agree | search wall s | autotune wall s | autotune/search | "
        "autotune pick |",
        "|" + "---|" * 17,
    ]
    for r in records:
        if "search8_ratio" not in r:
            lines.append(f"| {r['case']} | {r.get('space_size')} | — | — | error: {r.get('error', '?')[:120]} |" + " |" * 12)
            continue
        a = r["agreement"]
        at = r.get("autotune") or {}
        lines.append(
            f"| {r['case']} | {r['space_size']} | {r['feasible']} | "
            f"{', '.join(f'{k} {v}' for k, v in r['pruned'].items()) or '—'} | {r['exhaustive_best_ms']:.4f} | "
            f"{r['exhaustive_best_predicted_rank']} | {r['search8_ratio']:.3f} | {r['search16_ratio']:.3f} | "
            f"{r['top8_ratio']:.3f} | {r['top16_ratio']:.3f} | {r['median_config_ratio']:.3f} | "
            f"{a['smem_agree']}/{a['smem_checked']} | {a['spill_agree']}/{a['spill_checked']} | "
            f"{fmt(r.get('search_wall_s'), '.1f')} | {fmt(at.get('wall_s'), '.1f')} | "
            f"{fmt(r.get('autotune_over_search_wall'), '.1f')} | {fmt(at.get('ratio_vs_exhaustive'))} |")
    lines += ["", "Ratios are exhaustive best time / best time found (1.000 = found the best). 'search k' replays "
              "the adaptive search (model ranking, then neighbours of the best measured) on the exhaustive timings; "
              "'top-k' is the model's plain top k; 'median cfg' is what a typical config of the space gets."]
    (out_dir / "tiling_bench.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--autotune-worker":
        autotune_worker(sys.argv[2], sys.argv[3])
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--autotune", default=DEFAULT_AUTOTUNE, help="cases to also run triton.autotune on ('' none)")
    parser.add_argument("--max-wall-s", type=float, default=540.0)
    parser.add_argument("--workers", type=int, default=14)
    parser.add_argument("--timing-trials", type=int, default=None,
                        help="timed runs per config (default: adaptive, as verify); fewer for a quick pass")
    parser.add_argument("--no-search", action="store_true",
                        help="measure and replay only: skip the cold propose_tiling run per case (saves ~15 s a case)")
    parser.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny shapes, few configs (plumbing)")
    args = parser.parse_args()
    names = [c for c in args.cases.split(",") if c]
    unknown = [c for c in names if c not in CASES]
    if unknown:
        parser.error(f"unknown cases {unknown}; choose from {', '.join(CASES)}")
    args.autotune_cases = {c for c in args.autotune.split(",") if c}
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    deadline = started + args.max_wall_s
    records: list[dict] = []
    for name in names:
        if time.perf_counter() > deadline - 45:
            records.append({"case": name, "error": "skipped: wall-time budget"})
            continue
        t0 = time.perf_counter()
        try:
            record = run_case(name, args, out_dir, deadline)
        except Exception as exc:  # noqa: BLE001 - one broken case must not lose the others
            record = {"case": name, "error": f"{type(exc).__name__}: {exc}"[:2000]}
        record["case_wall_s"] = time.perf_counter() - t0
        records.append(record)
        print(json.dumps({k: record.get(k) for k in ("case", "search8_ratio", "search16_ratio", "top8_ratio",
                                                      "case_wall_s", "error")}), flush=True)
        write_report(out_dir, records, started, args)
    write_report(out_dir, records, started, args)
    print((out_dir / "tiling_bench.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
