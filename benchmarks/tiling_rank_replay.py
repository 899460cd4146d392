"""Offline replay (CPU) of the stored H200 tiling timings: the current tiling model's rank correlation per case.

    python3 benchmarks/tiling_rank_replay.py --out OUT [--before FILE.json]   (writes OUT.json, OUT.md)
    python3 benchmarks/tiling_rank_replay.py --search RUN/tiling_search.json --out OUT [--before OUT_EARLIER.json]

`--search` replays a `run.py tiling_search` run instead (the 12 cases timed through GpuTimer, 11-17 configs
each, see search_replay below).

No GPU is used: every time comes from a stored `tiling_bench.py` run on the H200
(benchmarks/results/archive/tiling/tiling_bench_*.json); only the model is re-run, here, at this commit.
Per case (the latest stored run of each of the ten cases):
  * runs that stored every config's time (`configs`: layernorm_a, rowsum_a, biasgelu_a/b): Spearman's rho of
    predicted vs measured time over the configs the model calls feasible and that ran correct, the exhaustive
    best's rank in the model's ranking, the replayed search (best found within 8 / 16 trials over the exhaustive
    best), and how flat the measured times are (share of configs within 2 / 5 / 10 % of the best: a flat plateau
    bounds what any rank correlation can read);
  * older runs kept only the exhaustive best and the best the search found: the exhaustive best's rank in
    the current model's ranking (and in the ranking of the model of that run), and whether the top 8 hold it.
`--before FILE.json` (this script's output at an earlier commit) adds the earlier numbers beside each case.
Then the guidance suite's recorded propose_tiling trials (multi-kernel attention + projections, tf32x3 GEMM;
`tiling_guidance_replay.py`): rho per case over its measured configs, beside the rho the model of that run gave.
Writes OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from egg_mcp.hardware import GPU_TABLE  # noqa: E402
from egg_mcp.tiling.dims import normalize_dims  # noqa: E402
from egg_mcp.tiling.kernel_calls import spearman  # noqa: E402
from egg_mcp.tiling.model import estimate_all  # noqa: E402
from egg_mcp.tiling.plan import config_key, simulate_search  # noqa: E402
from egg_mcp.tiling.space import enumerate_configs, extract_space  # noqa: E402
from tiling_bench import CASES, KERNELS  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "archive" / "tiling"
"""The stored tiling_bench.py runs (tiling_bench_<date>_<cases>.json)."""
SEARCH_LABEL = ("offline replay (CPU) of recorded H200 measurements: the times are the H200's, measured through "
                "GpuTimer by benchmarks/tiling_search.py; only the model is re-run")
LABEL = ("offline replay (CPU) of stored H200 timings: the times are the H200's, measured by "
         "benchmarks/tiling_bench.py in the files named per case; only the model is re-run")


def stored_files(results: Path | None = None) -> list[Path]:
    """The stored tiling_bench runs in `results` (default RESULTS), by name: tiling_bench_<date>_<cases>.json.
    Which run of a case wins does not depend on that order (stored_cases prefers per-config records)."""
    return sorted((RESULTS if results is None else results).glob("tiling_bench_*.json"))


def stored_cases(files: list[Path] | None = None) -> dict[str, tuple[str, dict]]:
    """case -> (file, record) for the latest run of each case in `files` (later files win; per-config records
    preferred over summary-only ones)."""
    out: dict[str, tuple[str, dict]] = {}
    for path in files if files is not None else stored_files():
        for record in json.loads(path.read_text()).get("cases", []):
            if record.get("exhaustive_best_ms") is None:
                continue
            have = out.get(record["case"])
            if have is None or record.get("configs") or not have[1].get("configs"):
                out[record["case"]] = (str(path.resolve().relative_to(REPO)) if path.resolve().is_relative_to(REPO)
                                       else str(path), record)
    return out


def _ranking(case: str, dims: dict | None):
    file, kind, dtype, _, case_dims = CASES[case]
    canonical = normalize_dims(kind, dims or case_dims)
    space = extract_space((KERNELS / f"{file}.py").read_text(), kind=kind, dims=canonical)
    configs, _, _ = enumerate_configs(space)
    estimates = estimate_all(configs, space, gpu=GPU_TABLE["H200"], dims=canonical, kind=kind, dtype=dtype)
    return estimates, space


def _rank_of(estimates, config: dict) -> int | str:
    key = config_key(config)
    feasible = [e for e in estimates if e.feasible]
    hit = next((i + 1 for i, e in enumerate(feasible) if config_key(e.config.values) == key), None)
    if hit is not None:
        return hit
    pruned = next((e for e in estimates if config_key(e.config.values) == key), None)
    return f"pruned ({'; '.join(pruned.reasons)})" if pruned else "not in the space"


def replay_case(case: str, file: str, record: dict) -> dict:
    estimates, space = _ranking(case, record.get("dims"))
    best_cfg, best_ms = record["exhaustive_best"], record["exhaustive_best_ms"]
    out = {"case": case, "file": file, "kernel": CASES[case][0], "kind": CASES[case][1],
           "dims": record.get("dims"), "exhaustive_best": best_cfg, "exhaustive_best_ms": best_ms,
           "best_rank_now": _rank_of(estimates, best_cfg),
           "best_rank_recorded": record.get("exhaustive_best_predicted_rank")}
    feasible = [e for e in estimates if e.feasible]
    out["best_in_top8_now"] = isinstance(out["best_rank_now"], int) and out["best_rank_now"] <= 8
    if not record.get("configs"):
        out["per_config_times"] = False
        out["note"] = ("this run stored only the exhaustive best and the search's pick: no rank correlation "
                       "can be computed from it (re-run tiling_exhaustive to get one)")
        return out
    oracle = {config_key(c["config"]): c["median_ms"] for c in record["configs"] if c.get("median_ms") is not None}
    pairs = [(e.predicted_ms, oracle[config_key(e.config.values)]) for e in feasible
             if config_key(e.config.values) in oracle]
    times = sorted(oracle.values())
    best = times[0]
    out.update({
        "per_config_times": True,
        "rho": spearman([p for p, _ in pairs], [t for _, t in pairs]),
        "rho_n": len(pairs),
        "measured_correct": len(oracle),
        "pruned_by_model_but_ran": sum(1 for e in estimates if not e.feasible and config_key(e.config.values) in oracle),
        "plateau": {f"within_{p}pct": round(sum(t <= best * (1 + p / 100) for _, t in pairs)
                                            / max(1, len(pairs)), 3) for p in (2, 5, 10)},
    })
    out["diagnostics"] = diagnostics(record, feasible, oracle)
    ranked = [(e.config.values, e.predicted_ms) for e in feasible]
    choices = {p.name: list(p.choices) for p in space.params if p.applicable}
    for k in (8, 16):
        found = [oracle[config_key(c)] for c in simulate_search(ranked, choices, oracle, k)
                 if oracle.get(config_key(c)) is not None]
        out[f"search{k}_ratio"] = round(best / min(found), 4) if found else 0.0
    return out


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    for r, i in enumerate(order):
        ranks[i] = float(r + 1)
    return ranks


def diagnostics(record: dict, feasible, oracle: dict) -> dict:
    """Why a case ranks as it does: the configs the model mis-orders most (rank distance), and how measured time
    follows resident warps per SM computed from the compiler's own register counts (occupancy: 2048 threads,
    32 programs, 64 K registers per SM, the H200's limits), which the model only estimates."""
    spec = GPU_TABLE["H200"]
    dims = record.get("dims") or {}
    rows = []
    for c in record["configs"]:
        if c.get("median_ms") is None or not c.get("registers"):
            continue
        cfg = c["config"]
        threads = 32 * cfg.get("NUM_WARPS", 4)
        regs = -(-c["registers"] // 8) * 8
        ctas = min(spec.max_blocks_per_sm, spec.max_threads_per_sm // threads, spec.regs_per_sm // (regs * threads))
        grid = -(-dims.get("n_rows", 1) // cfg.get("BLOCK_M", 1))
        if CASES[record["case"]][1] == "elementwise":
            grid *= -(-dims.get("n_cols", 1) // cfg.get("BLOCK_N", 1))
        rows.append((-min(ctas, grid / spec.sm_count) * cfg.get("NUM_WARPS", 4), c["median_ms"]))
    pairs = [(e.config.values, e.predicted_ms, oracle[config_key(e.config.values)]) for e in feasible
             if config_key(e.config.values) in oracle]
    pr, mr = _ranks([p for _, p, _ in pairs]), _ranks([t for _, _, t in pairs])
    worst = sorted(range(len(pairs)), key=lambda i: -abs(pr[i] - mr[i]))[:5]
    return {
        "rho_time_vs_fewer_resident_warps": spearman([r for r, _ in rows], [t for _, t in rows]) if rows else None,
        "most_misordered": [{"config": pairs[i][0], "predicted_ms": round(pairs[i][1], 4),
                             "measured_ms": round(pairs[i][2], 4), "predicted_rank": int(pr[i]),
                             "measured_rank": int(mr[i])} for i in worst],
    }


def _f(x, fmt=".2f") -> str:
    return "—" if x is None else format(x, fmt) if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)


def markdown(result: dict, before: dict | None) -> str:
    prior = {c["case"]: c for c in (before or {}).get("cases", [])}
    lines = [f"# Tiling model rank vs measured time: {LABEL}", "",
             f"Model at commit `{result['git_commit']}`" + (f"; 'before' = the same script at `{before['git_commit']}`"
                                                            if before else "") + ".", "",
             "| case | stored H200 run | rho before | rho now | n | within 5 % of best | best's rank now | "
             "search 8 | search 16 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in result["cases"]:
        b = prior.get(c["case"], {})
        lines.append(f"| {c['case']} | `{Path(c['file']).name}` | {_f(b.get('rho'))} | {_f(c.get('rho'))} | "
                     f"{_f(c.get('rho_n'), 'd')} | {_f((c.get('plateau') or {}).get('within_5pct'))} | "
                     f"{c['best_rank_now'] if isinstance(c['best_rank_now'], int) else 'pruned'} | "
                     f"{_f(c.get('search8_ratio'), '.3f')} | {_f(c.get('search16_ratio'), '.3f')} |")
    s = result["summary"]
    lines += ["", f"Cases with per-config times: {s['cases_with_rho']}; rho >= 0.7 on {s['rho_ge_0_7']} of them "
                  f"(median {_f(s['rho_median'])}). Exhaustive best in the model's top 8 on {s['best_in_top8']} of "
                  f"{s['cases']} cases.", ""]
    lines += [f"- {c['case']}: {c['note']}" for c in result["cases"] if c.get("note")]
    for c in result["cases"]:
        d = c.get("diagnostics")
        if not d or c.get("rho") is None or c["rho"] >= 0.7:
            continue
        worst = "; ".join(f"{', '.join(f'{k}={v}' for k, v in m['config'].items())}: predicted rank {m['predicted_rank']}"
                          f" ({m['predicted_ms'] * 1e3:.0f} us), measured rank {m['measured_rank']} "
                          f"({m['measured_ms'] * 1e3:.1f} us)" for m in d["most_misordered"][:3])
        lines += ["", f"**{c['case']} (rho {c['rho']:.2f} < 0.7).** {c['plateau']['within_5pct']:.0%} of its configs run "
                      f"within 5 % of the best. Measured time vs fewer resident warps per SM (from the compiler's "
                      f"registers): rho {_f(d['rho_time_vs_fewer_resident_warps'])}. Most mis-ordered: {worst}."]
    return "\n".join(lines) + "\n"


def run(files: list[Path] | None = None) -> dict:
    cases = [replay_case(case, file, record) for case, (file, record) in sorted(stored_cases(files).items())]
    rhos = sorted(c["rho"] for c in cases if c.get("rho") is not None)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "egg_mcp"], cwd=REPO, capture_output=True,
                                text=True).stdout.strip())
    return {
        "label": LABEL, "git_commit": commit.strip() + ("+dirty" if dirty else ""), "gpu_model": "NVIDIA H200",
        "cases": cases,
        "summary": {"cases": len(cases), "cases_with_rho": len(rhos), "rho_ge_0_7": sum(r >= 0.7 for r in rhos),
                    "rho_median": rhos[len(rhos) // 2] if rhos else None,
                    "best_in_top8": sum(1 for c in cases if c["best_in_top8_now"])},
    }


def _misordered(pairs: list[tuple[float, float]], margin: float = 0.02) -> tuple[int, int, int]:
    """(pairs, pairs the model orders against the measurement, those whose measured times differ by more than
    `margin`): a swap of two configs within timing noise (timing_cv ~0.1-0.5 %) is not a model error."""
    total = bad = big = 0
    for i, (p1, m1) in enumerate(pairs):
        for p2, m2 in pairs[i + 1:]:
            total += 1
            if (p1 - p2) * (m1 - m2) < 0:
                bad += 1
                big += abs(m1 - m2) > margin * min(m1, m2)
    return total, bad, big


def _search_space(record: dict, run_probe):
    """The case's space and per-launch calls as `tiling_search.run_case` built them; a multi-kernel case needs the
    launch probe (a CPU worker job on the meta device, `run_probe`), a single-kernel one prices its task dims."""
    import tiling_search as ts
    from egg_mcp.tiling.kernel_calls import kernel_calls

    inp = ts.case_inputs(record["case"], False)
    canonical = normalize_dims(inp["kind"], inp["dims"])
    space = extract_space(inp["candidate"], kind=inp["kind"], dims=canonical)
    launches = None
    if record["case"] in ts.MULTI_CASES and len(record.get("kernels") or []) > 1:
        launches = run_probe({"reference_source": inp["reference"], "candidate_source": inp["candidate"],
                              "dtype": inp["dtype"], "size_overrides": inp["overrides"]})
    space.calls, _ = kernel_calls(space, inp["kind"], canonical, launches)
    return space, canonical, inp


def _engine_probe(payload: dict) -> list[dict] | None:
    from engine_jobs import run_job

    outcome, _ = run_job("egg_mcp.tiling.launches:probe_launches", payload, timeout_s=120, uses_gpu=False)
    return (outcome.result or {}).get("launches") if outcome.ok else None


def search_replay(path: Path, run_probe=_engine_probe, files: list[Path] | None = None) -> dict:
    """Replay of a `tiling_search.json` (H200 times through GpuTimer): per case the rho recorded when it ran and
    the current model's, over the same correct configs, with the mis-ordered pairs (all / > 2 % apart measured).
    `files`: the stored exhaustive runs to compare the measured order with (default stored_files())."""
    data = json.loads(Path(path).read_text())
    exhaustive = {case: (file, rec) for case, (file, rec) in stored_cases(files).items() if rec.get("configs")}
    cases = []
    for record in data.get("cases", []):
        rows = [r for r in record.get("configs") or [] if r.get("measured_ms") is not None]
        out = {"case": record["case"], "kind": record.get("kind"), "dtype": record.get("dtype"),
               "rho_recorded": record.get("rho")}
        if not rows:
            cases.append(dict(out, note=record.get("error") or "no correct measured config"))
            continue
        space, canonical, inp = _search_space(record, run_probe)
        configs = [r["config"] for r in rows]
        estimates = {config_key(e.config.values): e for e in estimate_all(
            configs, space, gpu=GPU_TABLE["H200"], dims=canonical, kind=inp["kind"], dtype=inp["dtype"])}
        pairs = [(estimates[config_key(r["config"])].predicted_ms, r["measured_ms"]) for r in rows
                 if estimates[config_key(r["config"])].feasible]
        recorded = [(r["predicted_ms"], r["measured_ms"]) for r in rows if r.get("predicted_ms") is not None]
        times = [m for _, m in pairs]
        total, bad, big = _misordered(pairs)
        _, bad0, big0 = _misordered(recorded)
        out.update(n=len(pairs), pruned_now=len(rows) - len(pairs),
                   rho=spearman([p for p, _ in pairs], times), pairs=total, misordered=bad, misordered_2pct=big,
                   misordered_recorded=bad0, misordered_2pct_recorded=big0,
                   measured_spread=round(max(times) / min(times), 3) if times else None,
                   timing_cv_median=sorted(r["timing_cv"] for r in rows if r.get("timing_cv") is not None)[
                       len(rows) // 2] if all(r.get("timing_cv") is not None for r in rows) else None,
                   pick_over_best=round(min(times) / min(pairs)[1], 4) if pairs else None)
        if record["case"] in exhaustive:  # the same configs timed by another run and timer: how stable the order is
            file, stored = exhaustive[record["case"]]
            then = {config_key(c["config"]): c["median_ms"] for c in stored["configs"] if c.get("median_ms")}
            both = [(then[config_key(r["config"])], r["measured_ms"]) for r in rows if config_key(r["config"]) in then]
            out["repeat"] = {"file": file, "n": len(both), "rho_between_runs": spearman(*map(list, zip(*both)))
                             if len(both) >= 3 else None, "misordered_2pct": _misordered(both)[2]}
        cases.append(out)
    rhos = sorted(c["rho"] for c in cases if c.get("rho") is not None)
    before = sorted(c["rho_recorded"] for c in cases if c.get("rho_recorded") is not None)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "egg_mcp"], cwd=REPO, capture_output=True,
                                text=True).stdout.strip())
    return {"label": SEARCH_LABEL, "file": str(path), "git_commit": commit.strip() + ("+dirty" if dirty else ""),
            "gpu_model": "NVIDIA H200", "cases": cases,
            "summary": {"cases": len(cases), "with_rho": len(rhos), "rho_ge_0_7": sum(r >= 0.7 for r in rhos),
                        "rho_median": rhos[len(rhos) // 2] if rhos else None,
                        "rho_ge_0_7_recorded": sum(r >= 0.7 for r in before)}}


def search_markdown(result: dict, before: dict | None) -> str:
    prior = {c["case"]: c for c in (before or {}).get("cases", [])}
    head = "rho before" if before else "rho recorded (model at measurement)"
    lines = [f"# Tiling model rank vs measured time: {result['label']}", "",
             f"Times: `{result['file']}`. Model at commit `{result['git_commit']}`"
             + (f"; 'before' = the model at `{before['git_commit']}`" if before else "") + ".", "",
             f"| case | n | {head} | rho now | mis-ordered pairs before → now | of them > 2 % apart measured, "
             "before → now | measured max/min |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for c in result["cases"]:
        if c.get("n") is None:
            lines.append(f"| {c['case']} | 0 | — | — | — | — | {c.get('note', '')[:80]} |")
            continue
        b = prior.get(c["case"])
        rho0 = b.get("rho") if b else c.get("rho_recorded")
        bad0, big0 = (b["misordered"], b["misordered_2pct"]) if b else (c["misordered_recorded"],
                                                                          c["misordered_2pct_recorded"])
        lines.append(f"| {c['case']} | {c['n']} | {_f(rho0, '.3f')} | {_f(c['rho'], '.3f')} | {bad0} → {c['misordered']} of "
                     f"{c['pairs']} | {big0} → {c['misordered_2pct']} | {_f(c['measured_spread'], '.3f')} |")
    s = result["summary"]
    lines += ["", f"rho >= 0.7 on {s['rho_ge_0_7']} of {s['with_rho']} cases now (median {_f(s['rho_median'], '.3f')})"
                  + (f"; {sum(1 for c in prior.values() if (c.get('rho') or -1) >= 0.7)} before." if before else
                     f"; {s['rho_ge_0_7_recorded']} with the model that ran.")]
    repeats = [c for c in result["cases"] if (c.get("repeat") or {}).get("rho_between_runs") is not None]
    if repeats:
        lines += ["", "How reproducible the measured order is: the same configs in the stored exhaustive runs (another "
                      "timer, another day) vs this run, Spearman's rho between the two sets of times: " + "; ".join(
                          f"{c['case']} {c['repeat']['rho_between_runs']:.3f} over {c['repeat']['n']} configs "
                          f"({c['repeat']['misordered_2pct']} pairs swapped by > 2 %, `{Path(c['repeat']['file']).name}`)"
                          for c in repeats) + ". A model rho well below these is the model's error, not noise."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output path without extension (named by date and commit)")
    parser.add_argument("--before", help="this script's JSON from an earlier commit, shown beside each case")
    parser.add_argument("files", nargs="*", type=Path,
                        help="tiling_bench.json files to replay after the stored ones (a new tiling_exhaustive run); "
                             "default: benchmarks/results/archive/tiling/tiling_bench_*.json")
    parser.add_argument("--search", type=Path, help="a tiling_search.json (run.py tiling_search) to replay instead")
    args = parser.parse_args(argv)
    before = json.loads(Path(args.before).read_text()) if args.before else None
    if args.search:
        result = search_replay(args.search)
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
        out.with_suffix(".md").write_text(search_markdown(result, before))
        print(search_markdown(result, before))
        return 0
    result = run(stored_files() + list(args.files))
    from tiling_guidance_replay import markdown as guidance_markdown, replay as guidance_replay

    result["guidance"] = guidance_replay()
    if before:
        result["before"] = {"git_commit": before["git_commit"],
                            "rho": {c["case"]: c.get("rho") for c in before["cases"]}}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    text = markdown(result, before) + "\n## Guidance suite cases (" + result["guidance"]["label"] + ")\n\n" + "\n".join(
        guidance_markdown(result["guidance"])) + "\n"
    out.with_suffix(".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
