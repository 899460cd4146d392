"""Does the tiling cost model earn its lines? Three ways to pick 8 configs to measure, scored offline on exhaustive
H200 measurements (every config of a case compiled and timed; `benchmarks/tiling_bench.py` records them per config).

    python3 benchmarks/tiling_search_quality.py OUT.json [EXHAUSTIVE.json ...] [--calibration CALIBRATE.json]

Per case, the search's share of the exhaustive best (best time / best found within 8 measured configs; 1.000 = found
the best) for:
  * model:   the current cost model (`egg_mcp.tiling.model.estimate_all`) ranks, then `plan.simulate_search` walks
             around the best measured (what propose_tiling does), with the H200 datasheet leads and the constants
             fitted on it; with `--calibration FILE` also `model_calibrated`: the same with that `calibrate` record's
             ceilings and time constants (what a calibrated GPU's propose_tiling uses). Both also report the rank
             correlation over every measured config and the share of the model's first pick (top1);
  * simple:  the same walk over a ranking by a simple model: occupancy and waves, compulsory DRAM traffic at the
             DRAM ceiling, GEMM tile re-reads and flops at their ceilings, latency hiding by bytes in flight (three
             ceilings that `calibrate` measures, one latency constant);
  * random:  the same walk from a random order of the configs the model's resource rules keep (expected share,
             mean over ORDERS random orders), and plain random 8 of all configs (exact expectation).
A case's configs that failed or were not measured count as a spent trial that found nothing. The newest file wins
when two hold the same case. Writes OUT.json and prints a table.
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

from benchmarks.tiling_bench import CASES, KERNELS  # noqa: E402
from egg_mcp.hardware import GPU_TABLE, GpuSpec, apply_calibration  # noqa: E402
from egg_mcp.hardware.calibration_record import Calibration  # noqa: E402
from egg_mcp.tiling.kernel_calls import spearman  # noqa: E402
from egg_mcp.tiling.dims import normalize_dims  # noqa: E402
from egg_mcp.tiling.model import estimate_all  # noqa: E402
from egg_mcp.tiling.plan import config_key, simulate_search  # noqa: E402
from egg_mcp.tiling.space import enumerate_configs, extract_space  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
DEFAULT_FILES = [  # oldest first: a later file's case replaces an earlier one's
    RESULTS / "archive/tiling/tiling_bench_2026-11-30_biasgelu_a_biasgelu_b.json",
    RESULTS / "archive/tiling/tiling_bench_2026-11-30_layernorm_a_rowsum_a.json",
    RESULTS / "archive/tiling/probes_2026-12-01_4bb37b3-2f0d984/exhaustive/tiling_bench.json",
    RESULTS / "h200_2026-12-03/tiling_exhaustive_772d26e.json",
]
TRIALS = 8
ORDERS = 400
LATENCY_S = 1.0e-6  # DRAM round trip under load, order of magnitude (calibrate's dram_latency_s is unloaded: 0.35 us on the H200)


def load_cases(files: list[Path]) -> dict[str, dict]:
    cases: dict[str, dict] = {}
    for f in files:
        for case in json.loads(f.read_text())["cases"]:
            if case.get("configs"):
                cases[case["case"]] = dict(case, file=str(f.relative_to(REPO)))
    return cases


def simple_ms(values: dict[str, int], space, dims: dict[str, int], kind: str, dtype: str, gpu: GpuSpec) -> float | None:
    """Predicted time of one config, or None when it cannot fit (shared memory, registers)."""
    elt = 2 if dtype in ("bfloat16", "float16") else 4
    role = {p.role: values.get(p.name, p.current) for p in space.params if p.role in ("warps", "stages")}
    blocks = {p.axis: values.get(p.name, p.current) for p in space.params if p.role == "block" and p.axis}
    threads = 32 * (role.get("warps") or 4)
    if kind == "gemm":
        m, n, k = dims["M"], dims["N"], dims["K"]
        bm, bn, bk = blocks.get("M", 64), blocks.get("N", 64), blocks.get("K", 32)
        stages = role.get("stages") or 2
        programs = math.ceil(m / bm) * math.ceil(n / bn)
        smem = stages * (bm * bk + bk * bn) * elt
        regs = bm * bn / threads + (bm * bk + bk * bn) * elt / 4 / threads + 32
        tile_bytes = (bm * bk + bk * bn) * elt * stages
        dram = (m * k + n * k + m * n) * elt
        l2 = elt * (m * k * math.ceil(n / bn) + n * k * math.ceil(m / bm))
        ctype = "bf16" if elt == 2 else "tf32"
        work_s = max(dram / gpu.dram_bytes_per_s, l2 / (gpu.l2_bytes_per_s or 2.5 * gpu.dram_bytes_per_s),
                     2 * m * n * k / gpu.peak_flops.get(ctype, gpu.peak_flops["fp32"]))
    else:
        rows, cols = dims["n_rows"], dims["n_cols"]
        br, bc = blocks.get("n_rows", 1), min(blocks.get("n_cols", cols), max(cols, 1))
        programs = math.ceil(rows / br) * (math.ceil(cols / bc) if kind == "elementwise" else 1)
        smem = 0
        regs = 2 * br * bc * elt / 4 / threads + 24
        tile_bytes = br * bc * elt
        passes = 1 if (bc >= cols or kind in ("reduction", "elementwise")) else 2
        dram = rows * cols * elt * (2 if kind != "reduction" else 1)
        l2 = rows * cols * elt * (passes - 1)
        work_s = dram / gpu.dram_bytes_per_s + l2 / (gpu.l2_bytes_per_s or 2.5 * gpu.dram_bytes_per_s)
    if smem > gpu.smem_per_block_optin_bytes or regs > gpu.max_regs_per_thread or threads > gpu.max_threads_per_block:
        return None
    resident = min(gpu.max_threads_per_sm // threads, gpu.max_blocks_per_sm,
                   gpu.smem_per_sm_bytes // smem if smem else 64, int(gpu.regs_per_sm // (max(regs, 16) * threads)))
    if resident < 1:
        return None
    slots = gpu.sm_count * resident
    waves = math.ceil(programs / slots)
    busy = programs / (waves * slots)  # share of the slots the last-wave-quantised grid keeps busy
    in_flight = min(programs, slots) / gpu.sm_count * tile_bytes  # bytes a busy SM can have on the way
    needed = gpu.dram_bytes_per_s / gpu.sm_count * LATENCY_S
    hidden = min(1.0, in_flight / needed)
    return 1e3 * work_s / (busy * hidden)


def share(order: list[dict], oracle: dict, best: float) -> float:
    times = [oracle[config_key(c)] for c in order if oracle.get(config_key(c)) is not None]
    return best / min(times) if times else 0.0


def plain_random_share(times: list[float | None], best: float, k: int) -> float:
    """Exact expected share of the best of k distinct configs drawn uniformly (failures find nothing)."""
    n = len(times)
    ok = sorted(t for t in times if t is not None)
    if k >= n:
        return best / ok[0]
    total, comb = 0.0, math.comb(n, k)
    for i, t in enumerate(ok):  # P(best found is ok[i]) = C(n - i - 1, k - 1) / C(n, k): ok[i] drawn, none faster
        total += math.comb(n - i - 1, k - 1) / comb * best / t
    return total


def model_scores(estimates, choices: dict, oracle: dict, best: float) -> dict:
    """The model's search share, its rank correlation over the measured configs and its first pick's share."""
    feasible = sorted((e for e in estimates if e.feasible), key=lambda e: e.predicted_ms)
    picks = simulate_search([(e.config.values, e.predicted_ms) for e in feasible], choices, oracle, TRIALS)
    pairs = [(e.predicted_ms, t) for e in feasible if (t := oracle.get(config_key(e.config.values)))]
    first = next(t for _, t in pairs)
    return {"share": share(picks, oracle, best), "rho": spearman([p for p, _ in pairs], [t for _, t in pairs]),
            "top1": best / first, "picks": picks}


def score_case(case: dict, gpu: GpuSpec, calibrated: GpuSpec | None = None) -> dict:
    file, kind, dtype, _, dims = CASES[case["case"]]
    canonical = normalize_dims(kind, dims)
    space = extract_space((KERNELS / f"{file}.py").read_text(), kind=kind, dims=canonical)
    configs, _, _ = enumerate_configs(space)
    oracle = {config_key(r["config"]): r["median_ms"] for r in case["configs"]}
    measured = [v for v in oracle.values() if v is not None]
    best = min(measured)
    choices = {p.name: list(p.choices) for p in space.params if p.applicable}

    estimates = estimate_all(configs, space, gpu=gpu, dims=canonical, kind=kind, dtype=dtype)
    kept = [e.config.values for e in estimates if e.feasible]
    model = model_scores(estimates, choices, oracle, best)
    extra = {}
    if calibrated is not None:
        cal = model_scores(estimate_all(configs, space, gpu=calibrated, dims=canonical, kind=kind, dtype=dtype),
                           choices, oracle, best)
        extra = {"model_calibrated": cal["share"], "model_calibrated_rho": cal["rho"],
                 "model_calibrated_top1": cal["top1"], "model_calibrated_picks": cal["picks"]}

    simple_ranked = sorted(((c, p) for c in configs if (p := simple_ms(c, space, canonical, kind, dtype, gpu))),
                           key=lambda cp: cp[1])
    simple = simulate_search(simple_ranked, choices, oracle, TRIALS)

    rng = random.Random(0)
    walks = []
    for _ in range(ORDERS):
        order = list(kept)
        rng.shuffle(order)
        walks.append(share(simulate_search([(c, float(i + 1)) for i, c in enumerate(order)], choices, oracle, TRIALS),
                           oracle, best))
    return {
        "case": case["case"], "kind": kind, "dtype": dtype, "dims": canonical, "file": case["file"],
        "configs": len(configs), "measured_ok": len(measured), "kept_by_model_rules": len(kept),
        "simple_fits": len(simple_ranked), "best_ms": best,
        "model": model["share"], "model_rho": model["rho"], "model_top1": model["top1"], **extra,
        "simple": share(simple, oracle, best),
        "random_walk": sum(walks) / len(walks), "random_walk_p10": sorted(walks)[len(walks) // 10],
        "random_plain": plain_random_share([oracle.get(config_key(c)) for c in configs], best, TRIALS),
        "model_picks": model["picks"], "simple_picks": simple,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--calibration", type=Path, help="a calibrate record of the exhaustive runs' GPU model")
    args = parser.parse_args()
    gpu = GPU_TABLE["H200"]  # the exhaustive runs' GPU (datasheet leads; the model's own target in tiling_bench)
    calibrated = (apply_calibration(gpu, Calibration.model_validate_json(args.calibration.read_text()))
                  if args.calibration else None)
    rows = [score_case(c, gpu, calibrated) for c in load_cases(args.files or DEFAULT_FILES).values()]
    keys = ("model", "model_rho", "model_top1", "simple", "random_walk", "random_plain")
    if calibrated is not None:
        keys += ("model_calibrated", "model_calibrated_rho", "model_calibrated_top1")
    mean = {k: sum(r[k] for r in rows) / len(rows) for k in keys}
    worst = {k: min(r[k] for r in rows) for k in keys}
    Path(args.out).write_text(json.dumps({"trials": TRIALS, "orders": ORDERS, "gpu_spec": gpu.name,
                                          "calibration": str(args.calibration) if args.calibration else None,
                                          "mean": mean, "worst": worst, "cases": rows}, indent=1))
    print(f"| case | configs | ok | model | simple | random walk (p10) | random 8 |\n|{'---|' * 7}")
    for r in rows:
        print(f"| {r['case']} | {r['configs']} | {r['measured_ok']} | {r['model']:.3f} | {r['simple']:.3f} | "
              f"{r['random_walk']:.3f} ({r['random_walk_p10']:.3f}) | {r['random_plain']:.3f} |")
    print(f"| mean | | | {mean['model']:.3f} | {mean['simple']:.3f} | {mean['random_walk']:.3f} | "
          f"{mean['random_plain']:.3f} |")
    print(f"| worst | | | {worst['model']:.3f} | {worst['simple']:.3f} | {worst['random_walk']:.3f} | "
          f"{worst['random_plain']:.3f} |")
    label = {"model": "fit", "model_calibrated": "calibrated"}
    for key in ("model", "model_calibrated") if calibrated is not None else ("model",):
        print(f"model constants {label[key]}: share mean {mean[key]:.3f} worst {worst[key]:.3f}; rank correlation "
              f"mean {mean[key + '_rho']:.3f} worst {worst[key + '_rho']:.3f}; first pick mean "
              f"{mean[key + '_top1']:.3f} worst {worst[key + '_top1']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
