"""Re-score the current tiling model against what a past tiling_bench run recorded (offline, CPU;
in-sample for any run the model was calibrated on).

    python benchmarks/tiling_model_recheck.py RESULT.json [--ran-with softmax=1.25,norm=2.0,reduction=2.0,elementwise=1.5]

Result files that store every config (`configs`: time, registers, spills): the spill
verdicts are read from them, and the search is replayed with the current model's ranking on the
recorded times (best found within 8 and 16 trials vs the exhaustive best).
Older files keep only the configs where model and compiler disagreed, so the compiler's verdict on
every config is rebuilt as: the model the run used (`--ran-with`: its live registers per element,
one value per kind as the model had then) flipped on the recorded disagreements. The rebuild is
checked against the agreement count the run recorded before anything is re-scored; cases where not
every config compiled are skipped (their set of verdicts is not recoverable). No search replay there.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from egg_mcp.hardware import GPU_TABLE  # noqa: E402
from egg_mcp.tiling import costs, model  # noqa: E402
from egg_mcp.tiling.dims import normalize_dims  # noqa: E402
from egg_mcp.tiling.plan import config_key, simulate_search  # noqa: E402
from egg_mcp.tiling.space import enumerate_configs, extract_space  # noqa: E402
from tiling_bench import CASES, KERNELS  # noqa: E402


@contextmanager
def flat_live_model(values: dict[str, float]):
    """The model as it was before looping and single-block rows had separate factors."""
    saved = dict(costs._LIVE_PER_ELEMENT), dict(costs._LIVE_PER_ELEMENT_LOOPING)
    costs._LIVE_PER_ELEMENT.update(values)
    costs._LIVE_PER_ELEMENT_LOOPING.update(values)
    try:
        yield
    finally:
        costs._LIVE_PER_ELEMENT.clear()
        costs._LIVE_PER_ELEMENT.update(saved[0])
        costs._LIVE_PER_ELEMENT_LOOPING.clear()
        costs._LIVE_PER_ELEMENT_LOOPING.update(saved[1])


def current_estimates(name: str, dims: dict | None = None):
    """(estimates ranked by the current model, the space) for a benchmark case."""
    file, kind, dtype, _, case_dims = CASES[name]
    canonical = normalize_dims(kind, dims or case_dims)
    space = extract_space((KERNELS / f"{file}.py").read_text(), kind=kind, dims=canonical)
    configs, _, _ = enumerate_configs(space)
    return model.estimate_all(configs, space, gpu=GPU_TABLE["H200"], dims=canonical, kind=kind, dtype=dtype), space


def spill_predictions(name: str, dims: dict | None = None) -> dict:
    estimates, _ = current_estimates(name, dims)
    return {config_key(e.config.values): "spill" in e.rules for e in estimates}  # as tiling_bench scores it


def recheck_stored(record: dict) -> dict:
    """Exact re-score from the per-config records: spill verdicts and a search replay."""
    name = record["case"]
    estimates, space = current_estimates(name, record.get("dims"))
    predicted = {config_key(e.config.values): "spill" in e.rules for e in estimates}
    verdicts = {config_key(c["config"]): c["spills"] > 0 for c in record["configs"]
                if c.get("spills") is not None}  # None: no spill verdict (tiling_bench.compiler_facts)
    wrong = [dict(k) for k, spilled in verdicts.items() if predicted.get(k) != spilled]
    oracle = {config_key(c["config"]): c["median_ms"] for c in record["configs"]}
    times = [t for t in oracle.values() if t is not None]
    out = {"case": name, "current_model_spills": f"{len(verdicts) - len(wrong)}/{len(verdicts)}", "still_wrong": wrong}
    if times:
        best = min(times)
        ranked = [(e.config.values, e.predicted_ms) for e in estimates if e.feasible]
        choices = {p.name: list(p.choices) for p in space.params if p.applicable}
        for k in (8, 16):
            found = [oracle[config_key(c)] for c in simulate_search(ranked, choices, oracle, k)
                     if oracle.get(config_key(c)) is not None]
            out[f"search{k}_ratio"] = round(best / min(found), 4) if found else 0.0
        out["best_rank_now"] = next((i + 1 for i, (c, _) in enumerate(ranked) if oracle.get(config_key(c)) == best),
                                    "pruned")
    return out


def recheck(record: dict, ran_with: dict[str, float] | None) -> dict:
    name, agreement = record["case"], record.get("agreement")
    if record.get("configs"):
        return recheck_stored(record)
    if ran_with is None:
        return {"case": name, "skipped": "no per-config records in this file: give --ran-with to rebuild them"}
    if not agreement:
        return {"case": name, "skipped": record.get("error", "no agreement recorded")}
    if agreement["spill_checked"] != record["space_size"]:
        return {"case": name, "skipped": f"only {agreement['spill_checked']}/{record['space_size']} configs compiled"}
    with flat_live_model(ran_with):
        old = spill_predictions(name)
    flipped = {config_key(d["config"]) for d in agreement["disagreements"] if d.get("spills") is not None}
    compiler = {key: (not spill) if key in flipped else spill for key, spill in old.items()}
    old_agree = sum(old[k] == compiler[k] for k in compiler)
    if old_agree != agreement["spill_agree"]:
        return {"case": name, "skipped": f"rebuild inconsistent: {old_agree} vs recorded {agreement['spill_agree']}"}
    new = spill_predictions(name)
    wrong = [dict(k) for k in compiler if new[k] != compiler[k]]
    return {"case": name, "recorded": f"{agreement['spill_agree']}/{agreement['spill_checked']}",
            "current_model": f"{len(compiler) - len(wrong)}/{len(compiler)}", "still_wrong": wrong}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("result")
    parser.add_argument("--ran-with", help="older files: kind=live registers per element the run's model used")
    args = parser.parse_args()
    ran_with = ({k: float(v) for k, v in (item.split("=") for item in args.ran_with.split(","))}
                if args.ran_with else None)
    for record in json.loads(Path(args.result).read_text())["cases"]:
        print(json.dumps(recheck(record, ran_with)))


if __name__ == "__main__":
    main()
