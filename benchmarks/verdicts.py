"""Suite `verdicts` (benchmarks/run.py): what verify says about honest kernels and about cheats, on this machine.

Honest: the builtin softmax's shipped demo kernels and the adversarial suite's correct ones, the KernelBench
examples in benchmarks/problems/ (76_Gemm_Add_ReLU, 43_MinGPTCausalAttention) and verify_latency's IEEE GEMM,
each at its problem's full size: every one must be `correct` with no violation, and its median time is reported
(run this script from an older checkout too, `--honest-only`, to hold the timings against it in the same run).
Cheats (skipped with --honest-only): the timing-loop cheats of tests/gpu/test_timed_audit_gpu.py and the
compute-route and tell cases in tests/adversarial/, which must each get a verdict other than `correct`.

    python3 benchmarks/verdicts.py OUT.json [--honest-only] [--quick]   (--quick: CPU interpreter, softmax cases)

Imports egg_mcp from PYTHONPATH (so an older checkout's package can be measured with this script).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _load(path: Path):
    """A module by file (this script must not put its own checkout on sys.path: egg_mcp comes from PYTHONPATH)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_verdicts_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _honest() -> list[tuple[str, str, str, dict]]:
    from egg_mcp.problems.builtin import builtin_source

    softmax = builtin_source("softmax")
    out = []
    for path in sorted((REPO / "egg_mcp" / "e2e" / "demo_kernels" / "softmax").glob("*.py")):
        out.append((f"demo/{path.stem}", softmax, path.read_text(), {}))
    out.append(("adversarial/correct_row_softmax", softmax,
                (REPO / "tests" / "adversarial" / "correct_row_softmax.py").read_text(), {}))
    kb = REPO / "benchmarks" / "problems" / "kernelbench"
    out.append(("kernelbench/76_Gemm_Add_ReLU", (kb / "76_Gemm_Add_ReLU.py").read_text(),
                (kb / "gemm_add_relu_triton.py").read_text(), {}))
    out.append(("kernelbench/43_MinGPTCausalAttention", (kb / "43_MinGPTCausalAttention.py").read_text(),
                (kb / "mingpt_attention_triton.py").read_text(), {}))
    latency = _load(REPO / "benchmarks" / "verify_latency.py")
    CANDIDATE, FULL, REFERENCE = latency.CANDIDATE, latency.FULL, latency.REFERENCE
    out.append(("verify_latency/gemm_ieee", REFERENCE.format(m=FULL["m"], k=FULL["k"], n=FULL["n"]),
                CANDIDATE.format(**FULL["tile"]), {}))
    return out


def _cheats() -> list[tuple[str, str, str, dict]]:
    from egg_mcp.problems.builtin import builtin_source

    softmax = builtin_source("softmax")
    timed = _load(REPO / "tests" / "gpu" / "test_timed_audit_gpu.py")
    CHEATS, LARGE, SMALL = timed.CHEATS, timed.LARGE, timed.SMALL

    out = [(f"timed/{name}/{size}", softmax, src, sizes)
           for name, src in CHEATS.items() for size, sizes in (("small", SMALL), ("large", LARGE))]
    for path in sorted((REPO / "tests" / "adversarial").glob("*.py")):
        if path.stem.startswith(("correct_", "gpu_")):
            continue
        out.append((f"adversarial/{path.stem}", softmax, path.read_text(), {"batch_size": 1024, "dim": 1000}))
    return out


def _expect(name: str, gpu: bool) -> str | None:
    if not name.startswith("adversarial/"):
        return None
    text = (REPO / "tests" / "adversarial" / f"{name.split('/', 1)[1]}.py").read_text()
    match = (gpu and re.search(r"^gpu-expect: (\w+)", text, re.M)) or re.search(r"^expect: (\w+)", text, re.M)
    return match.group(1) if match else None


async def _run(cases: list[tuple[str, str, str, dict]], quick: bool, out: Path) -> list[dict]:
    from egg_mcp.contract import EvalOptions
    from egg_mcp.evaluation.engine import WorkerEvaluator

    ev = WorkerEvaluator(scratch_dir=Path(__import__("tempfile").mkdtemp(prefix="verdicts-")), spare_workers=1,
                         force_interpreter=quick)
    await ev.start_pool()
    rows = []
    try:
        for name, reference, source, sizes in cases:
            opts = EvalOptions(size_overrides=sizes, isolated_timing=True)
            t0 = time.monotonic()
            result = await ev.evaluate(reference, source, opts)
            timing = result.timing
            rows.append({
                "name": name, "verdict": result.verdict, "expected": _expect(name, gpu=not quick),
                "violations": sorted({f.check for f in result.integrity if f.severity == "violation"}),
                "reviews": sorted({f.check for f in result.integrity if f.severity == "review"}),
                "median_ms": timing.median_ms if timing else None, "method": timing.method if timing else None,
                "isolated_ms": timing.isolated.median_ms if timing and timing.isolated else None,
                # why a short call was timed by events (an older package has neither field)
                "estimate_ms": getattr(timing, "estimate_ms", None), "graph_fallback": getattr(timing, "graph_fallback", None),
                "timed_calls_audited": (result.judge or {}).get("timed_calls_audited"),
                "wall_s": round(time.monotonic() - t0, 2), "phase_s": result.phase_s,
                "summary": result.summary[:300]})
            out.write_text(json.dumps({"partial": True, "rows": rows}, indent=1))  # a cut-off run keeps its rows
            print(f"{name:<48} {result.verdict:<20} {rows[-1]['violations']} "
                  f"{'' if timing is None else f'{timing.median_ms:.4f} ms'}", flush=True)
    finally:
        await ev.aclose()
    return rows


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    honest_only, quick = "--honest-only" in argv, "--quick" in argv
    cases = _honest() + ([] if honest_only else _cheats())
    if quick:  # the CPU interpreter: the softmax cases at its QUICK_SIZES (no timing, so no timing-loop cheat)
        cases = [(n, r, s, {"batch_size": 8, "dim": 100}) for n, r, s, _ in cases
                 if n.startswith(("demo/", "adversarial/"))]
    rows = asyncio.run(_run(cases, quick, out))
    honest = [r for r in rows if not r["name"].startswith(("timed/", "adversarial/")) or
              r["name"] == "adversarial/correct_row_softmax"]
    cheats = [r for r in rows if r not in honest]
    summary = {
        "honest_correct": sum(r["verdict"] == "correct" and not r["violations"] for r in honest),
        "honest": len(honest),
        "cheats_not_correct": sum(r["verdict"] != "correct" for r in cheats), "cheats": len(cheats),
        "cheats_correct": [r["name"] for r in cheats if r["verdict"] == "correct"],
        "cheats_unexpected_verdict": [r["name"] for r in cheats if r["expected"] and r["verdict"] != r["expected"]],
    }
    out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    print(json.dumps(summary, indent=1))
    return 0 if summary["honest_correct"] == summary["honest"] and not summary["cheats_correct"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
