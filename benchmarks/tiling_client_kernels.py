"""propose_tiling on client-written KernelBench kernels: is what it recommends never slower? (run once on the H200)

    python benchmarks/tiling_client_kernels.py OUT_DIR [--kernels a,b] [--budget-s 60] [--max-trials 8]
                                                       [--max-wall-s 340] [--no-confirm] [--smoke]
    (or: benchmarks/run.py tiling_client --out DIR)

For each client kernel of benchmarks/problems/kernelbench/ with a TUNING_SPACE (the plain, split-K and persistent
GEMM + bias + ReLU of level2/76, the MinGPT attention of level3/43 at batch_size 32), propose_tiling runs for real
as the server runs it: the launch probe first (each kernel's own dims, its time spent from the budget), then the
search (the current config measured first, up to --max-trials in all, --budget-s for the whole call) through the
real engine (tiling_bench.LocalEvaluator: the measuring job, and a WorkerEvaluator for the probe and for verify's
path, which re-verifies a winner), ranked for GPU_TABLE["H200"] (the datasheet leads, as tiling_bench; no
calibration is stored on a fresh machine). The reference is the KernelBench file, the candidate the client file.
Recorded per kernel: the current config and its measured median, the recommendation (or "keep current") and its
median, their ratio (current / recommended: >= 1 is never slower), the re-verification, the trials, where the time
went, the note and warnings, and whether the recommended source changes only tunables the tool reported (each
changed line an assignment of a changed parameter; nothing it excluded). Where a config is recommended, an
independent job then times the current and the recommended source again (ABAB; --no-confirm skips it).

never_slower: for every recommended config, its time is <= the current one's in the tool's own job, in verify's
re-verification (when it timed both) and, on the GPU, in the independent job; true when nothing is recommended.
Writes OUT_DIR/tiling_client_kernels.json and .md (rewritten after every kernel), stamped with the git commit
(EGG_MCP_GIT_COMMIT, else git rev-parse) and the versions; exits 1 when never_slower is false or a kernel failed.
--smoke: the CPU interpreter at tiny sizes, max_trials 2, short budgets (the plumbing; interpreter wall times are
not GPU times, so the independent job runs but does not count; ~6 min on 2 CPU cores).
Runtime on the H200: ~5-6 min (4 budgets of 60 s, each kernel's share of --max-wall-s; verify's re-run of a winner
can pass its share of the budget; ~15 s per independent timing).
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.tiling_bench import LocalEvaluator, fmt, run_measure_job  # noqa: E402
from egg_mcp.contract import EvalOptions, default_tolerance  # noqa: E402
from egg_mcp.hardware import GPU_TABLE  # noqa: E402
from egg_mcp.problems.loader import module_int_constants  # noqa: E402
from egg_mcp.tiling.plan import config_key  # noqa: E402
from egg_mcp.tiling.search import probe_launches, propose_tiling  # noqa: E402
from egg_mcp.tiling.space import current_config, extract_space  # noqa: E402

KB = REPO / "benchmarks" / "problems" / "kernelbench"
SCRIPT = "tiling_client_kernels"


def _gemm76(c: dict) -> dict[str, int]:
    return {"M": c["batch_size"], "N": c["out_features"], "K": c["in_features"]}


def _mingpt(c: dict) -> dict[str, int]:  # the qkv projection, the reference's heaviest op (the server's dims)
    return {"M": c["batch_size"] * c["seq_len"], "N": 3 * c["n_embd"], "K": c["n_embd"]}


KERNELS = {  # name: (reference, client candidate, size_overrides, task dims from the sizes, kind)
    "gemm_add_relu": ("76_Gemm_Add_ReLU.py", "gemm_add_relu_triton.py", {}, _gemm76, "gemm"),
    "gemm_add_relu_splitk": ("76_Gemm_Add_ReLU.py", "gemm_add_relu_splitk_triton.py", {}, _gemm76, "gemm"),
    "gemm_add_relu_persistent": ("76_Gemm_Add_ReLU.py", "gemm_add_relu_persistent_triton.py", {}, _gemm76, "gemm"),
    "mingpt_attention": ("43_MinGPTCausalAttention.py", "mingpt_attention_triton.py", {"batch_size": 32}, _mingpt,
                         "gemm"),
}
SMOKE_SIZES = {  # tiny sizes for the CPU interpreter (76's not multiples of the blocks)
    "76_Gemm_Add_ReLU.py": {"batch_size": 20, "in_features": 40, "out_features": 24},
    "43_MinGPTCausalAttention.py": {"batch_size": 2, "seq_len": 32, "n_embd": 32, "n_head": 2, "max_seqlen": 64},
}
SMOKE_TRIALS, SMOKE_BUDGET_S = 2, 40.0
CONFIRM_S = 25.0  # kept back per kernel for the independent timing of a recommendation
MIN_BUDGET_S = 20.0
GPU_SPEC = "H200"


# ------------------------------------------------------------------------------------------ checks


def changed_lines(old: str, new: str) -> list[tuple[str, str]]:
    """(old line, new line) for each line the recommendation rewrote; a line added or removed pairs with ''."""
    pairs: list[tuple[str, str]] = []
    a, b = old.splitlines(), new.splitlines()
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "equal":
            continue
        olds, news = a[i1:i2], b[j1:j2]
        for k in range(max(len(olds), len(news))):
            pairs.append((olds[k] if k < len(olds) else "", news[k] if k < len(news) else ""))
    return pairs


def within_tunables(proposal, candidate_source: str, current: dict[str, int]) -> dict[str, Any]:
    """Does the recommendation change only what the tool reported as tunable? Each changed parameter reported,
    applicable, its value among its choices and not excluded; each changed source line an int assignment of a
    changed parameter (NAME = v or NAME=v) whose old line differs from it only by that value."""
    if proposal.recommended is None:
        return {"ok": True, "why": "nothing recommended: the source is kept as written", "changed": {}, "lines": []}
    values = proposal.recommended.values
    params = {p.name: p for p in proposal.parameters}
    changed = {k: [current.get(k), v] for k, v in values.items() if current.get(k) != v}
    problems = []
    for name, (_, new) in changed.items():
        p = params.get(name)
        if p is None or not p.applicable:
            problems.append(f"{name}: not a tunable the tool reported")
        elif new not in p.choices:
            problems.append(f"{name}={new}: not among its reported choices {p.choices}")
        if name in proposal.excluded:
            problems.append(f"{name}: excluded by the tool ({proposal.excluded[name]})")
    lines = changed_lines(candidate_source, proposal.recommended_source or candidate_source)
    for old, new in lines:
        hit = None
        for name, (before, after) in changed.items():
            pat = re.compile(rf"\b{re.escape(name)}(\s*=\s*){after}\b")
            if before is not None and pat.search(new) and pat.sub(rf"{name}\g<1>{before}", new) == old:
                hit = name
                break
        if hit is None:
            problems.append(f"source line changed outside the reported tunables: {old.strip()!r} -> {new.strip()!r}")
    if changed and not lines:
        problems.append("the recommended source is the unchanged source")
    return {"ok": not problems, "why": "; ".join(problems) or "only reported tunables changed", "changed": changed,
            "lines": [[o, n] for o, n in lines]}


def _ratio(current: float | None, other: float | None) -> float | None:
    return current / other if current and other else None


def confirm(reference: str, candidate: str, recommended: str, current: dict, rec: dict, args, overrides: dict,
            timeout_s: float) -> dict[str, Any]:
    """The current and the recommended source timed again in a fresh job of the real engine, ABAB (each the mean of
    its two medians): a measurement the tool's choice did not see."""
    tol = default_tolerance("float32")
    order = [(current, candidate), (rec, recommended), (current, candidate), (rec, recommended)]
    payload = {"reference_source": reference, "dtype": "float32", "size_overrides": overrides, "atol": tol.atol,
               "rtol": tol.rtol, "device": args.device, "compile_workers": 2, "time_budget_s": timeout_s - 5,
               "candidates": [{"config": c, "source": s} for c, s in order]}
    result, error, wall = run_measure_job(payload, timeout_s=timeout_s)
    if error:
        return {"error": error[:1500], "wall_s": round(wall, 1)}
    rows = result["results"]
    times = [r["median_ms"] if r.get("correct") else None for r in rows]
    out: dict[str, Any] = {"wall_s": round(wall, 1), "device": result.get("device"), "medians_ms": times,
                           "errors": [r.get("error") for r in rows if not r.get("correct")]}
    if len(times) == 4 and all(t is not None for t in times):
        out["current_ms"], out["recommended_ms"] = (times[0] + times[2]) / 2, (times[1] + times[3]) / 2
        out["ratio"] = out["current_ms"] / out["recommended_ms"]
    return out


# ------------------------------------------------------------------------------------------- run


def _measured(proposal, values: dict[str, int] | None) -> dict[str, Any] | None:
    if values is None:
        return None
    row = next((r for r in proposal.ranked if config_key(r.config.values) == config_key(values)
                and (r.measured_ms is not None or r.correct is not None)), None)
    return None if row is None else {"ms": row.measured_ms, "correct": row.correct, "error": row.error}


async def _propose(ev: LocalEvaluator, reference: str, candidate: str, overrides: dict, dims: dict, kind: str,
                   args, budget_s: float):
    options = EvalOptions(dtype="float32", tolerance=default_tolerance("float32"), size_overrides=overrides)
    t0 = time.perf_counter()
    try:
        launches, probe_note = await probe_launches(ev, reference_source=reference, candidate_source=candidate,
                                                    options=options)
        proposal = await propose_tiling(ev, reference_source=reference, candidate_source=candidate, options=options,
                                        launches=launches, gpu=GPU_TABLE[GPU_SPEC], dims=dims, kind=kind,
                                        max_trials=args.max_trials, time_budget_s=budget_s,
                                        spent_s=time.perf_counter() - t0)
    finally:
        await ev.aclose()
    if probe_note:
        proposal.warnings.append(f"{probe_note}: every kernel priced at the task's dims")
    return proposal, launches


def run_kernel(name: str, args, budget_s: float, confirm_s: float) -> dict[str, Any]:
    ref_file, cand_file, overrides, dims_of, kind = KERNELS[name]
    if args.smoke:
        overrides = SMOKE_SIZES[ref_file]
    reference, candidate = (KB / ref_file).read_text(), (KB / cand_file).read_text()
    sizes = {**module_int_constants(reference), **overrides}
    dims = dims_of(sizes)
    record: dict[str, Any] = {"kernel": name, "reference": f"benchmarks/problems/kernelbench/{ref_file}",
                              "candidate": f"benchmarks/problems/kernelbench/{cand_file}", "size_overrides": overrides,
                              "dims": dims, "kind": kind, "max_trials": args.max_trials, "budget_s": round(budget_s, 1)}
    space = extract_space(candidate)
    current = current_config(space)
    t0 = time.perf_counter()
    try:
        proposal, launches = asyncio.run(_propose(LocalEvaluator(args.device, args.timing_trials), reference,
                                                  candidate, overrides, dims, kind, args, budget_s))
    except Exception as exc:  # noqa: BLE001 - a tool failure is the finding: recorded with its traceback
        import traceback

        record.update(error=f"{type(exc).__name__}: {exc}"[:2000], traceback=traceback.format_exc()[-4000:],
                      wall_s=round(time.perf_counter() - t0, 1))
        return record
    record["wall_s"] = round(time.perf_counter() - t0, 1)
    rec = proposal.recommended.values if proposal.recommended else None
    base, win = _measured(proposal, current), _measured(proposal, rec)
    check = proposal.reverified
    record.update({
        "tunables": {p.name: {"role": p.role, "current": p.current, "choices": p.choices, "from": p.choices_from}
                     for p in proposal.parameters if p.applicable and len(p.choices) > 1},
        "excluded": proposal.excluded,
        "kernels_priced": [{"kernel": k.kernel, "kind": k.kind, "dims": k.dims, "dims_from": k.dims_from,
                            "parameters": k.parameters} for k in proposal.kernels],
        "launches_probed": [{"kernel": r.get("kernel"), "grid": r.get("grid")} for r in launches or []],
        "space_size": proposal.space_size, "feasible": proposal.feasible_count,
        "current": current, "current_ms": base["ms"] if base else None,
        "current_measured": base,
        "recommended": rec if rec is not None else "keep current",
        "recommended_ms": win["ms"] if win else None,
        "ratio": _ratio(base["ms"] if base else None, win["ms"] if win else None) if rec is not None else 1.0,
        "recommended_reason": proposal.recommended_reason,
        "reverified": check.model_dump(mode="json") if check else None,
        "reverify_ratio": _ratio(check.current_ms, check.winner_ms) if check else None,
        "trials_used": proposal.trials_used, "stopped_by": proposal.stopped_by,
        "not_measured": [c.values for c in proposal.not_measured],
        "measured": [{"config": r.config.values, "predicted_ms": r.predicted_ms, "measured_ms": r.measured_ms,
                      "correct": r.correct, "error": (r.error or "")[:300] or None}
                     for r in proposal.ranked if r.measured_ms is not None or r.correct is not None],
        "rank_correlation": proposal.rank_correlation, "rank_correlation_n": proposal.rank_correlation_n,
        "time_s": proposal.time_s, "note": proposal.note, "warnings": proposal.warnings,
        "within_tunables": within_tunables(proposal, candidate, current),
    })
    if rec is not None and not args.no_confirm:
        record["confirm"] = confirm(reference, candidate, proposal.recommended_source or candidate, current, rec,
                                    args, overrides, confirm_s)
    record["never_slower"] = never_slower(record, counts_confirm=not args.smoke)
    return record


def never_slower(r: dict[str, Any], counts_confirm: bool) -> bool:
    """Nothing recommended, or the recommendation no slower in every measurement that timed both."""
    if r.get("error"):
        return False
    if r["recommended"] == "keep current":
        return True
    ratios = [r.get("ratio"), r.get("reverify_ratio")]
    if counts_confirm and r.get("confirm"):
        ratios.append(r["confirm"].get("ratio"))
    timed = [x for x in ratios if x is not None]
    return r.get("ratio") is not None and all(x >= 1.0 for x in timed)


# ---------------------------------------------------------------------------------------- report


def _cfg(values) -> str:
    return values if isinstance(values, str) else ", ".join(f"{k}={v}" for k, v in values.items())


def write_report(out_dir: Path, records: list[dict], started: float, args, prov: dict) -> dict[str, Any]:
    done = [r for r in records if "error" not in r]
    summary = {
        "kernels": len(records), "proposed": len(done), "errors": [r["kernel"] for r in records if "error" in r],
        "recommended": sum(1 for r in done if r["recommended"] != "keep current"),
        "never_slower": bool(records) and all(r.get("never_slower") for r in records),
        "all_within_tunables": all(r["within_tunables"]["ok"] for r in done),
        "wall_s": round(time.perf_counter() - started, 1), "smoke": args.smoke, "device": args.device,
        "gpu_spec": f"GPU_TABLE[{GPU_SPEC!r}] (datasheet leads)", "max_trials": args.max_trials,
        "budget_s": args.budget_s, "confirm": not args.no_confirm,
    }
    data = {"summary": summary, "provenance": prov, "kernels": records}
    (out_dir / f"{SCRIPT}.json").write_text(json.dumps(data, indent=1, default=str))
    lines = [
        f"# propose_tiling on client-written kernels ({'CPU interpreter smoke' if args.smoke else 'H200'})", "",
        f"commit {prov.get('git_commit')}{' (dirty)' if prov.get('git_dirty') else ''}; never slower: "
        f"**{summary['never_slower']}**; recommendations {summary['recommended']}/{len(done)}; every change within "
        f"the reported tunables: {summary['all_within_tunables']}; wall {summary['wall_s']} s; model target "
        f"{summary['gpu_spec']}", "",
        "| kernel | current config | current ms | recommended | rec. ms | ratio | re-verified (cur / rec ms) | "
        "confirm ratio | trials | stopped | time s (probe/model/start/compile/measure/verify/total) | "
        "within tunables |",
        "|" + "---|" * 12,
    ]
    for r in records:
        if "error" in r:
            lines.append(f"| {r['kernel']} | error: {r['error'][:200]} |" + " |" * 10)
            continue
        rv = r.get("reverified") or {}
        rv_text = (f"{'confirmed' if rv.get('confirmed') else 'not confirmed'} ({fmt(rv.get('current_ms'), '.4f')} / "
                   f"{fmt(rv.get('winner_ms'), '.4f')})" if rv else "not run")
        t = r["time_s"]
        times = "/".join(fmt(t.get(k), ".1f") for k in ("probe", "model", "start", "compile", "measure", "verify",
                                                          "total"))
        lines.append(
            f"| {r['kernel']} | {_cfg(r['current'])} | {fmt(r['current_ms'], '.4f')} | {_cfg(r['recommended'])} | "
            f"{fmt(r['recommended_ms'], '.4f')} | {fmt(r['ratio'], '.3f')} | {rv_text} | "
            f"{fmt((r.get('confirm') or {}).get('ratio'), '.3f')} | {r['trials_used']} | {r['stopped_by']} | "
            f"{times} | {r['within_tunables']['ok']} |")
    lines += ["", "ratio = current / recommended median (>= 1: never slower; 1.000 when the current config is kept). "
              "Notes:", ""]
    for r in done:
        lines.append(f"* **{r['kernel']}**: {r['note']}. Reason: {r['recommended_reason'][:600]}")
        lines += [f"  * warning: {w[:400]}" for w in r["warnings"]]
    (out_dir / f"{SCRIPT}.md").write_text("\n".join(lines) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--kernels", default=",".join(KERNELS))
    parser.add_argument("--budget-s", type=float, default=60.0, help="propose_tiling's time budget per kernel")
    parser.add_argument("--max-trials", type=int, default=8)
    parser.add_argument("--max-wall-s", type=float, default=340.0,
                        help="the whole run's budget: a kernel's budget shrinks to its share of what is left")
    parser.add_argument("--timing-trials", type=int, default=None, help="timed runs per config (default: adaptive)")
    parser.add_argument("--no-confirm", action="store_true", help="skip the independent timing of a recommendation")
    parser.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny sizes, max_trials 2 (plumbing)")
    args = parser.parse_args(argv)
    names = [k for k in args.kernels.split(",") if k]
    unknown = [k for k in names if k not in KERNELS]
    if unknown:
        parser.error(f"unknown kernels {unknown}; choose from {', '.join(KERNELS)}")
    args.device = "interpreter" if args.smoke else "cuda"
    if args.smoke:
        args.max_trials, args.budget_s = min(args.max_trials, SMOKE_TRIALS), min(args.budget_s, SMOKE_BUDGET_S)
        args.max_wall_s = max(args.max_wall_s, len(names) * (args.budget_s + 60))
    from benchmarks.run import provenance

    prov = provenance()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    deadline = started + args.max_wall_s
    records: list[dict] = []
    for i, name in enumerate(names):
        share = (deadline - time.perf_counter()) / (len(names) - i) - CONFIRM_S
        budget = min(args.budget_s, share)
        if budget < MIN_BUDGET_S:
            records.append({"kernel": name, "error": f"skipped: wall budget spent ({share:.0f} s left for it)"})
        else:
            records.append(run_kernel(name, args, budget, CONFIRM_S + (30.0 if args.smoke else 0.0)))
        r = records[-1]
        print(json.dumps({k: r.get(k) for k in ("kernel", "current_ms", "recommended", "recommended_ms", "ratio",
                                                "reverify_ratio", "never_slower", "wall_s", "error")}, default=str),
              flush=True)
        write_report(args.out_dir, records, started, args, prov)
    summary = write_report(args.out_dir, records, started, args, prov)
    print((args.out_dir / f"{SCRIPT}.md").read_text())
    return 0 if summary["never_slower"] and not summary["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
