"""How much of the tiling model's rank correlation the timing noise can explain (offline, CPU; issue 18).

    python3 benchmarks/tiling_rho_noise.py --out OUT [RUN/tiling_search.json ...]   (writes OUT.json, OUT.md)

For every case of the recorded `run.py tiling_search` runs on the H200 (default: the two runs at b4a4599 and
42095a3 in benchmarks/results/archive/h200_2026-12-01_b4a4599-ae198ae/; the times are the H200's, GpuTimer with a
CV per config; only the model is re-run here):
  * rho: Spearman's rho of the current model's predicted time vs the measured time (as tiling_rank_replay);
  * noise-tied pairs: config pairs whose measured times differ by less than K (= 2) times their combined timing
    standard deviation (sqrt((cv1 m1)^2 + (cv2 m2)^2)): pairs no measurement of this precision can order;
  * rho_best_within_noise: the highest rho the current model's ranking reaches when every measured time may move
    within +-K sigma in the model's favour (a greedy, achievable assignment: a lower bound of that maximum, so an
    upper bound of what noise can be blamed for is rho_best_within_noise - rho);
  * ceiling_perfect_model: the rho a model that predicted every config's true time exactly would read against one
    measurement of this noise (mean over seeded re-draws of the times with their own CV);
  * rho_repeat: Spearman's rho between the two runs' times on the configs both measured (another measurement of
    the same configs on the same GPU: how reproducible the measured order is).
A case whose rho stays below 0.7 while rho_best_within_noise, ceiling_perfect_model and rho_repeat are near 1 is
limited by the model, not by the measurement. Writes OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from egg_mcp.tiling.kernel_calls import spearman  # noqa: E402

RUNS = [REPO / "benchmarks/results/archive/h200_2026-12-01_b4a4599-ae198ae/tiling_search/tiling_search.json",
        REPO / "benchmarks/results/archive/h200_2026-12-01_b4a4599-ae198ae/tiling_search_42095a3/tiling_search.json"]
K_SIGMA = 2.0


def noise_tied(m1: float, cv1: float, m2: float, cv2: float, k: float = K_SIGMA) -> bool:
    """True when two measured times differ by less than k combined standard deviations."""
    return abs(m1 - m2) < k * math.hypot(cv1 * m1, cv2 * m2)


def tied_pairs(measured: list[float], cvs: list[float], k: float = K_SIGMA) -> tuple[int, int]:
    """(pairs, noise-tied pairs) over all config pairs."""
    n = len(measured)
    pairs = n * (n - 1) // 2
    tied = sum(noise_tied(measured[i], cvs[i], measured[j], cvs[j], k) for i in range(n) for j in range(i + 1, n))
    return pairs, tied


def best_within_noise(predicted: list[float], measured: list[float], cvs: list[float],
                      k: float = K_SIGMA) -> list[float]:
    """Measured times moved within +-k sigma in the model's favour: starting from the measurement, every pair the
    model orders against it whose intervals overlap is re-ordered (both times to either side of their midpoint,
    each kept inside its own interval) when that raises rho; repeated until nothing does. Hill-climbing from an
    achievable point, so its rho is >= the measured rho and a lower bound of the best reachable."""
    lo = [m * (1 - k * cv) for m, cv in zip(measured, cvs)]
    hi = [m * (1 + k * cv) for m, cv in zip(measured, cvs)]
    times = list(measured)
    best = spearman(predicted, times)
    if best is None:
        return times
    improved = True
    while improved:
        improved = False
        for i in range(len(times)):
            for j in range(len(times)):
                if predicted[i] >= predicted[j] or times[i] <= times[j]:
                    continue  # only pairs the model orders i < j while the times say i > j
                mid = (times[i] + times[j]) / 2
                eps = 1e-9 * mid
                ti, tj = max(lo[i], min(mid - eps, hi[i])), min(hi[j], max(mid + eps, lo[j]))
                if ti >= tj:
                    continue
                trial = list(times)
                trial[i], trial[j] = ti, tj
                rho = spearman(predicted, trial)
                if rho is not None and rho > best + 1e-12:
                    times, best, improved = trial, rho, True
    return times


def perfect_model_ceiling(measured: list[float], cvs: list[float], draws: int = 400, seed: int = 0) -> float | None:
    """Mean rho of the true times (taken as the measured ones) against re-draws of them with each config's CV."""
    if len(measured) < 3:
        return None
    rng = random.Random(seed)
    rhos = [spearman(measured, [m * (1 + rng.gauss(0.0, cv)) for m, cv in zip(measured, cvs)]) for _ in range(draws)]
    rhos = [r for r in rhos if r is not None]
    return sum(rhos) / len(rhos) if rhos else None


def _predictions(record: dict, run_probe) -> dict[str, float]:
    """config key -> the current model's predicted ms for the configs of one recorded case."""
    import tiling_rank_replay as rr
    from egg_mcp.hardware import GPU_TABLE
    from egg_mcp.tiling.model import estimate_all
    from egg_mcp.tiling.plan import config_key

    space, canonical, inp = rr._search_space(record, run_probe)
    configs = [r["config"] for r in record["configs"] if r.get("measured_ms") is not None]
    return {config_key(e.config.values): e.predicted_ms for e in estimate_all(
        configs, space, gpu=GPU_TABLE["H200"], dims=canonical, kind=inp["kind"], dtype=inp["dtype"]) if e.feasible}


def analyse_case(rows: list[dict], predicted: dict[str, float], k: float = K_SIGMA) -> dict:
    """The noise figures of one case: rows are the run's configs ({config, measured_ms, timing_cv})."""
    from egg_mcp.tiling.plan import config_key

    rows = [r for r in rows if r.get("measured_ms") is not None and r.get("timing_cv") is not None
            and config_key(r["config"]) in predicted]
    pred = [predicted[config_key(r["config"])] for r in rows]
    meas = [r["measured_ms"] for r in rows]
    cvs = [r["timing_cv"] for r in rows]
    pairs, tied = tied_pairs(meas, cvs, k)
    best = best_within_noise(pred, meas, cvs, k)
    return {"n": len(rows), "rho": spearman(pred, meas), "pairs": pairs, "noise_tied_pairs": tied,
            "timing_cv_median": sorted(cvs)[len(cvs) // 2] if cvs else None,
            "rho_best_within_noise": spearman(pred, best), "ceiling_perfect_model": perfect_model_ceiling(meas, cvs),
            "within_2pct_of_best": sum(m <= 1.02 * min(meas) for m in meas) if meas else 0}


def run(paths: list[Path], run_probe=None) -> dict:
    import tiling_rank_replay as rr
    from egg_mcp.tiling.plan import config_key

    probe = run_probe or rr._engine_probe
    runs = {p: {c["case"]: c for c in json.loads(Path(p).read_text())["cases"]} for p in paths}
    cases: dict[str, dict] = {}
    for path, records in runs.items():
        for name, record in records.items():
            if not [r for r in record.get("configs") or [] if r.get("measured_ms") is not None]:
                continue
            entry = analyse_case(record["configs"], _predictions(record, probe))
            cases.setdefault(name, {"runs": {}})["runs"][_run_name(path)] = entry
    if len(paths) >= 2:  # the same configs measured by two runs
        first, second = runs[paths[0]], runs[paths[1]]
        for name, entry in cases.items():
            a = {config_key(r["config"]): r["measured_ms"] for r in (first.get(name) or {}).get("configs") or []
                 if r.get("measured_ms") is not None}
            b = {config_key(r["config"]): r["measured_ms"] for r in (second.get(name) or {}).get("configs") or []
                 if r.get("measured_ms") is not None}
            both = [key for key in a if key in b]
            entry["repeat"] = {"runs": [_run_name(paths[0]), _run_name(paths[1])], "n": len(both),
                               "rho_repeat": spearman([a[x] for x in both], [b[x] for x in both])}
    return {"label": "offline (CPU): the times and their CVs are the H200's (run.py tiling_search, GpuTimer); only "
                     "the model is re-run", "k_sigma": k_sigma_label(), "files": [str(Path(p).relative_to(REPO))
                                                                                  if Path(p).is_relative_to(REPO)
                                                                                  else str(p) for p in paths],
            "cases": cases}


def k_sigma_label() -> str:
    return f"{K_SIGMA:g} combined standard deviations (timing_cv x time per config)"


def _run_name(path) -> str:
    parent = Path(path).parent.name
    return parent if parent != "tiling_search" else "tiling_search_b4a4599"


def _f(x, fmt=".3f") -> str:
    return "—" if x is None else format(x, fmt)


def markdown(result: dict) -> str:
    lines = ["# Tiling model rho against the timing noise (" + result["label"] + ")", "",
             f"Noise-tied: measured times within {result['k_sigma']}. Files: "
             + ", ".join(f"`{f}`" for f in result["files"]) + ".", "",
             "| case | run | n | rho now | noise-tied pairs | within 2 % of best | rho, ties resolved for the model | "
             "perfect model vs this noise | rho between the two runs |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, entry in result["cases"].items():
        for run_name, c in entry["runs"].items():
            rep = (entry.get("repeat") or {}).get("rho_repeat")
            lines.append(f"| {name} | {run_name} | {c['n']} | {_f(c['rho'])} | {c['noise_tied_pairs']} of {c['pairs']} | "
                         f"{c['within_2pct_of_best']} | {_f(c['rho_best_within_noise'])} | "
                         f"{_f(c['ceiling_perfect_model'])} | {_f(rep)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output path without extension (named by date and commit)")
    parser.add_argument("runs", nargs="*", type=Path,
                        help="tiling_search.json files (default: RUNS, the b4a4599 and 42095a3 runs)")
    args = parser.parse_args(argv)
    result = run(args.runs or RUNS)
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
