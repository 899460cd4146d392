"""Offline replay (CPU) of the guidance suite's recorded propose_tiling trials: the model at this commit, re-run
on the configs the H200 measured (benchmarks/results/archive/h200_2026-12-01_0f0ae24-6438ad0/guidance_*.json,
`tiling.measured`).

    python3 benchmarks/tiling_guidance_replay.py [GUIDANCE.json ...]

(a new `run.py guidance --out D` record can be passed as GUIDANCE.json: its rho at the model it ran with, beside now.)

No GPU: the measured times are the H200's, recorded by `benchmarks/run.py guidance` (guidance_suite.py). The
candidate's kernels are priced as that run told them apart (`tiling.kernel_calls`: each launch's own kind, dims and
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

from egg_mcp.hardware.calibration_record import Calibration  # noqa: E402
from egg_mcp.hardware import apply_calibration, spec_for  # noqa: E402
from egg_mcp.tiling.kernel_calls import spearman  # noqa: E402
from egg_mcp.tiling.model import _estimate_one, call_view, estimate  # noqa: E402
from egg_mcp.tiling.tiling_types import KernelCall  # noqa: E402
from egg_mcp.tiling.space import extract_space  # noqa: E402

RUNS = REPO / "benchmarks" / "results" / "archive" / "h200_2026-12-01_0f0ae24-6438ad0"
GUIDANCE = [RUNS / "guidance_6438ad0.json"]
CALIBRATION = RUNS / "calibrate_3753365.json"
KB = REPO / "benchmarks" / "problems" / "kernelbench"
CANDIDATES = {"kb76_gemm_add_relu": "gemm_add_relu_triton.py", "kb43_mingpt_attention": "mingpt_attention_triton.py"}
LABEL = ("offline replay (CPU) of propose_tiling trials recorded on the H200 by benchmarks/run.py guidance; the times "
         "are the H200's, only the model is re-run")


def h200_spec(calibration: Path | None = None):
    """The H200's spec with the stored calibration applied, as the server used it there."""
    calibration = CALIBRATION if calibration is None else calibration
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


COMPILED = REPO / "benchmarks" / "results" / "archive" / "tiling" / "compile_study_guidance.json"


def compile_agreement(gpu, path: Path | None = None) -> dict:
    """The model's shared memory and programs per SM against Triton's own sm_90 build of every config of the two
    candidates' spaces (tiling_compile_guidance.py): a check on configs the H200 never ran (held out)."""
    from egg_mcp.tiling.attention import attention_smem
    from egg_mcp.tiling.costs import _ctas_per_sm, _round_up, dot_regs

    path = COMPILED if path is None else path
    study = json.loads(path.read_text())
    out: dict = {"file": str(path.relative_to(REPO)), "triton": study["triton"]}
    for r in study["rows"]:
        if "error" in r:
            continue
        c, w, s = r["config"], r["config"]["num_warps"], r["config"]["num_stages"]
        bm, bn = c["BLOCK_M"], c["BLOCK_N"]
        compiled_c = _ctas_per_sm(gpu, 32 * w, r["registers"], r["shared_bytes"])
        row = out.setdefault(r["kernel"], {"configs": 0, "smem_exact": 0, "ctas_agree_now": 0, "ctas_agree_before": 0})
        row["configs"] += 1
        if r["kernel"] == "attn_kernel":
            smem = attention_smem(bm, bn, c["BLOCK_D"], s, bm >= 64 and w >= 4, "tf32x3") * 4
            before = (s * 2 * bn * c["BLOCK_D"] + bm * c["BLOCK_D"]) * 4  # the model of guidance_6438ad0
            row["smem_exact"] += smem == r["shared_bytes"]
            row["smem_exact_before"] = row.get("smem_exact_before", 0) + (before == r["shared_bytes"])
            continue
        bk = c["BLOCK_K"]
        smem = s * (bm + bn) * bk * 4
        now = _ctas_per_sm(gpu, 32 * w, min(255, _round_up(dot_regs(bm, bn, bk, w, "tf32x3"), 8)), smem)
        before = _ctas_per_sm(gpu, 32 * w, min(255, _round_up(bm * bn / (32 * w) + 32, 8)), smem)
        row["smem_exact"] += smem == r["shared_bytes"]
        row["ctas_agree_now"] += now == compiled_c
        row["ctas_agree_before"] += before == compiled_c
    return out


def replay(files: list[Path] | None = None) -> dict:
    gpu = h200_spec()
    cases = []
    for path in files or GUIDANCE:
        data = json.loads(Path(path).read_text())
        for record in data.get("result", data)["problems"]:  # run.py's record, or guidance_suite.py's own file
            case = replay_problem(record, gpu)
            if case is not None:
                rel = Path(path).resolve()
                case["file"] = str(rel.relative_to(REPO)) if rel.is_relative_to(REPO) else str(path)
                cases.append(case)
    return {"label": LABEL, "calibration": str(CALIBRATION.relative_to(REPO)), "cases": cases,
            "compiler_check": compile_agreement(gpu) if COMPILED.exists() else None}


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
            lines.append(f"- {cfg}: {r['measured_ms']:.3f} / {r['predicted_ms_recorded']:.3f} / {now}"
                         + (f" = {parts}" if len(r["per_launch_ms_now"]) > 1 else ""))
    check = result.get("compiler_check")
    if check:
        lines += ["", f"Against Triton {check['triton']}'s own sm_90 build of every config of the two candidates' spaces "
                      f"(`{Path(check['file']).name}`, compiled on a CPU; configs the H200 never ran):"]
        for kernel, row in check.items():
            if not isinstance(row, dict):
                continue
            if kernel == "attn_kernel":
                lines.append(f"- {kernel}: shared memory exact on {row['smem_exact']}/{row['configs']} configs "
                             f"(model of the recorded run: {row['smem_exact_before']}/{row['configs']})")
            else:
                lines.append(f"- {kernel}: programs per SM as the compiler's registers and shared memory allow on "
                             f"{row['ctas_agree_now']}/{row['configs']} configs (model of the recorded run: "
                             f"{row['ctas_agree_before']}/{row['configs']}); shared memory exact on "
                             f"{row['smem_exact']}/{row['configs']}")
    return lines


if __name__ == "__main__":
    out = replay([Path(a) for a in sys.argv[1:]] or None)
    print("\n".join(markdown(out)))
