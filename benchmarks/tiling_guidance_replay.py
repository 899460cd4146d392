"""Offline replay (CPU) of the guidance suite's recorded propose_tiling trials: the model at this commit, re-run
on the configs the H200 measured (benchmarks/results/h200_2026-12-01_s6/guidance_*.json, `tiling.measured`).

    python3 benchmarks/tiling_guidance_replay.py [GUIDANCE.json ...]

No GPU: the measured times are the H200's, recorded by `benchmarks/run.py guidance` (guidance_suite.py). The
candidate's kernels are priced as that run told them apart (`tiling.kernels`: each launch's own kind, dims and
parameters, read there by the meta-device launch probe), on the H200 spec with the ceilings of the stored
calibration (calibrate_3753365.json, same GPU model, same day; the guidance run calibrated again 35 min later:
DRAM 4.26 TB/s in both, the replayed predictions of the model of that run are within 0.6 % of its recorded ones).
Per case: Spearman's rho over the measured configs (6 per case: small; say so beside every rho), and each
launch's predicted time per config, so a mis-ranking can be traced to the kernel that causes it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from egg_mcp.calibration.models import Calibration  # noqa: E402
from egg_mcp.hardware import apply_calibration, spec_for  # noqa: E402
from egg_mcp.tiling.kernels import spearman  # noqa: E402
from egg_mcp.tiling.model import _estimate_one, call_view, estimate  # noqa: E402
from egg_mcp.tiling.models import KernelCall  # noqa: E402
from egg_mcp.tiling.space import extract_space  # noqa: E402

S6 = REPO / "benchmarks" / "results" / "h200_2026-12-01_s6"
GUIDANCE = [S6 / "guidance_6438ad0.json"]
CALIBRATION = S6 / "calibrate_3753365.json"
KB = REPO / "benchmarks" / "problems" / "kernelbench"
CANDIDATES = {"kb76_gemm_add_relu": "gemm_add_relu_triton.py", "kb43_mingpt_attention": "mingpt_attention_triton.py"}
LABEL = ("offline replay (CPU) of propose_tiling trials recorded on the H200 by benchmarks/run.py guidance; the times "
         "are the H200's, only the model is re-run")


def h200_spec(calibration: Path = CALIBRATION):
    """The H200's spec with the stored calibration applied, as the server used it there."""
    cal = Calibration.model_validate(json.loads(calibration.read_text())["result"]["calibration"])
    return apply_calibration(spec_for("NVIDIA H200"), cal)


def _space(problem: str, tiling: dict):
    source = (KB / CANDIDATES[problem]).read_text()
    first = tiling["kernels"][0]
    space = extract_space(source, kind=first["kind"], dims=first["dims"])
    if len(tiling["kernels"]) > 1:  # the launches as the recorded run told them apart
        space.calls = [KernelCall(kernel=k["kernel"], kind=k["kind"], dims=k["dims"], params=k["parameters"],
                                  precision=k.get("precision"), dims_from=k.get("dims_from", "launch"))
                       for k in tiling["kernels"]]
    return space, first


def replay_problem(record: dict, gpu) -> dict | None:
    """One guidance problem's recorded trials, re-priced: rho (recorded model vs now) and per-launch times."""
    tiling = record.get("tiling") or {}
    trials = [m for m in tiling.get("measured", []) if m.get("measured_ms") is not None]
    if record.get("problem") not in CANDIDATES or not trials:
        return None
    space, first = _space(record["problem"], tiling)
    rows = []
    for m in trials:
        est = estimate(m["config"], space, gpu=gpu, dims=first["dims"], kind=first["kind"])
        parts = {}
        for i, call in enumerate(space.calls):
            e = _estimate_one(m["config"], call_view(space, call), gpu, call.dims, call.kind, "float32")
            parts[f"{i}:{call.kernel}"] = round(e.predicted_ms, 4) if e.predicted_ms is not None else None
        rows.append({"config": m["config"], "measured_ms": round(m["measured_ms"], 4),
                     "predicted_ms_recorded": round(m["predicted_ms"], 4),
                     "predicted_ms_now": round(est.predicted_ms, 4) if est.feasible else None,
                     "per_launch_ms_now": parts, "pruned_now": est.reasons if not est.feasible else []})
    ok = [r for r in rows if r["predicted_ms_now"] is not None]
    return {"case": record["problem"], "n": len(rows),
            "rho_recorded": spearman([r["predicted_ms_recorded"] for r in rows], [r["measured_ms"] for r in rows]),
            "rho_now": spearman([r["predicted_ms_now"] for r in ok], [r["measured_ms"] for r in ok]),
            "rho_now_n": len(ok), "rows": rows}


def replay(files: list[Path] | None = None) -> dict:
    gpu = h200_spec()
    cases = []
    for path in files or GUIDANCE:
        for record in json.loads(Path(path).read_text())["result"]["problems"]:
            case = replay_problem(record, gpu)
            if case is not None:
                rel = Path(path).resolve()
                case["file"] = str(rel.relative_to(REPO)) if rel.is_relative_to(REPO) else str(path)
                cases.append(case)
    return {"label": LABEL, "calibration": str(CALIBRATION.relative_to(REPO)), "cases": cases}


def markdown(result: dict) -> list[str]:
    lines = ["| case | stored H200 run | rho recorded (model of that run) | rho now | n |", "| --- | --- | --- | --- | --- |"]
    f = lambda x: "—" if x is None else f"{x:.2f}"  # noqa: E731
    for c in result["cases"]:
        lines.append(f"| {c['case']} | `{Path(c['file']).name}` | {f(c['rho_recorded'])} | {f(c['rho_now'])} | "
                     f"{c['rho_now_n']} |")
    for c in result["cases"]:
        lines += ["", f"{c['case']} (ms: measured on the H200 / predicted then / predicted now = per launch):"]
        for r in sorted(c["rows"], key=lambda r: r["measured_ms"]):
            cfg = ", ".join(f"{k}={v}" for k, v in r["config"].items())
            now = "pruned" if r["predicted_ms_now"] is None else f"{r['predicted_ms_now']:.3f}"
            parts = " + ".join(f"{v:.3f}" for v in r["per_launch_ms_now"].values() if v is not None)
            lines.append(f"- {cfg}: {r['measured_ms']:.3f} / {r['predicted_ms_recorded']:.3f} / {now} = {parts}")
    return lines


if __name__ == "__main__":
    out = replay([Path(a) for a in sys.argv[1:]] or None)
    print("\n".join(markdown(out)))
