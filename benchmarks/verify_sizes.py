"""Suite `verify_sizes` (benchmarks/run.py): what a verify costs beyond the candidate's own work, at every size.

A client verifies many times per task, so what verify adds around the candidate (making inputs, the reference's
outputs, shipping and comparing outputs, starting and confining a runner) is what decides whether a verify takes
seconds or a minute. Three tasks through the real MCP server (`mcp.Client(server)` in-process, persistent
judge), each verified N times back to back after one warm-up (a distinct comment per call keeps the verify cache
out of it):

* `gemm`: verify_latency's 2048x4096 @ 4096x4096 fp32 GEMM with its IEEE Triton kernel (inputs 96 MiB);
* `softmax_full`: KernelBench level1/23_Softmax at its full size, softmax over 393216 columns of 4096 rows
  (inputs 6 GiB), with a two-pass online-softmax kernel;
* `relu_2gb`: an element-wise ReLU over a 2 GiB input.

Per call: client wall; the runner-reported Triton compile; the candidate's own GPU time, bounded from above by the
judge's timing phases (timing_candidate + timing_isolated: the timed calls and the timer's own overhead) plus its
correctness calls (trials x median); and `overhead_s` = wall - compile - that GPU time: the issue's target is
overhead p50 <= 1.5 s at every size. The judge's phase_s is kept per call, so the part that grows with size is
named.

    python3 benchmarks/run.py verify_sizes --out DIR [--quick]   (--quick: CPU interpreter, tiny shapes)
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.verify_latency import CANDIDATE as GEMM_CANDIDATE
from benchmarks.verify_latency import REFERENCE as GEMM_REFERENCE
from benchmarks.verify_latency import _p50

SOFTMAX_REFERENCE = '''import torch
import torch.nn as nn

batch_size = {rows}
dim = {cols}


class Model(nn.Module):
    """Softmax over dim 1 (KernelBench level1/23_Softmax)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
'''

SOFTMAX_CANDIDATE = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_two_pass(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    m = tl.full((BLOCK,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * stride + start + offs, mask=start + offs < n_cols, other=float("-inf"))
        new_m = tl.maximum(m, x)
        alpha = tl.where(new_m == float("-inf"), 0.0, tl.exp(m - new_m))  # a lane with no column yet
        s = s * alpha + tl.where(x == float("-inf"), 0.0, tl.exp(x - new_m))
        m = new_m
    row_max = tl.max(m, 0)
    total = tl.sum(s * tl.exp(m - row_max), 0)
    for start in range(0, n_cols, BLOCK):
        mask = start + offs < n_cols
        x = tl.load(x_ptr + row * stride + start + offs, mask=mask, other=float("-inf"))
        tl.store(y_ptr + row * stride + start + offs, tl.exp(x - row_max) / total, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        softmax_two_pass[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK={block}, num_warps=8)
        return y
'''

RELU_REFERENCE = '''import torch
import torch.nn as nn

rows = {rows}
cols = {cols}


class Model(nn.Module):
    """ReLU over a large input: the work is one read and one write of each element."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
'''

RELU_CANDIDATE = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, {block}),)](x, y, n, BLOCK={block}, num_warps=8)
        return y
'''

FULL_TASKS = {
    "gemm": (GEMM_REFERENCE.format(m=2048, k=4096, n=4096),
             GEMM_CANDIDATE.format(bm=128, bn=128, bk=32, prec="ieee")),
    "softmax_full": (SOFTMAX_REFERENCE.format(rows=4096, cols=393216), SOFTMAX_CANDIDATE.format(block=4096)),
    "relu_2gb": (RELU_REFERENCE.format(rows=16384, cols=32768), RELU_CANDIDATE.format(block=4096)),
}
QUICK_TASKS = {
    "gemm": (GEMM_REFERENCE.format(m=32, k=32, n=32), GEMM_CANDIDATE.format(bm=16, bn=16, bk=16, prec="ieee")),
    "softmax_full": (SOFTMAX_REFERENCE.format(rows=4, cols=300), SOFTMAX_CANDIDATE.format(block=128)),
    "relu_2gb": (RELU_REFERENCE.format(rows=8, cols=100), RELU_CANDIDATE.format(block=128)),
}
TARGET_OVERHEAD_S = 1.5


def call_row(structured: dict[str, Any], wall: float) -> dict[str, Any]:
    """One verify: its wall split into the candidate's compile, its GPU time (bounded above) and the rest."""
    result = structured["result"]
    phase = result.get("phase_s") or {}
    judge = result.get("judge") or {}
    timing = result.get("timing") or {}
    compile_s = judge.get("runner_reported_triton_compile_s") or 0.0
    trials = result.get("correctness_trials") or 0
    gpu_s = (phase.get("timing_candidate") or 0.0) + (phase.get("timing_isolated") or 0.0)
    gpu_s += trials * (timing.get("median_ms") or 0.0) / 1e3
    return {"wall_s": round(wall, 3), "verdict": structured["verdict"], "cached": structured["cached"],
            "triton_compile_s": round(compile_s, 3), "candidate_gpu_s_at_most": round(gpu_s, 3),
            "overhead_s": round(wall - compile_s - gpu_s, 3), "median_ms": timing.get("median_ms"),
            "timing_method": timing.get("method"), "phase_s": phase, "output_exchange": judge.get("output_exchange"),
            "judge_gpu_peak_gib": judge.get("gpu_peak_reserved_gib"),
            "judge_gpu_live_gib": judge.get("gpu_peak_allocated_gib"),
            "summary": structured["summary"][:300] if structured["verdict"] != "correct" else None}


def task_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    phases: dict[str, list[float]] = {}
    for row in rows:
        for key, value in (row["phase_s"] or {}).items():
            phases.setdefault(key, []).append(value)
    return {"n": len(rows), "all_correct": all(r["verdict"] == "correct" for r in rows),
            "p50_wall_s": _p50([r["wall_s"] for r in rows]),
            "p50_triton_compile_s": _p50([r["triton_compile_s"] for r in rows]),
            "p50_candidate_gpu_s_at_most": _p50([r["candidate_gpu_s_at_most"] for r in rows]),
            "p50_overhead_s": _p50([r["overhead_s"] for r in rows]),
            "p50_phase_s": {k: _p50(v) for k, v in sorted(phases.items())},
            "candidate_median_ms": _p50([r["median_ms"] for r in rows if r["median_ms"]])}


async def measure(workdir: Path, quick: bool, n_calls: int, only: list[str] | None = None) -> dict[str, Any]:
    from mcp import Client

    from egg_mcp.config import ServerConfig
    from egg_mcp.evaluation.engine import WorkerEvaluator
    from egg_mcp.server import create_server

    tasks = QUICK_TASKS if quick else FULL_TASKS
    tasks = {k: v for k, v in tasks.items() if not only or k in only}
    config = ServerConfig(workspace=workdir / "ws", force_interpreter=quick, max_eval_bytes=64 << 30)
    evaluator = WorkerEvaluator(scratch_dir=workdir / "scratch", force_interpreter=quick, judge="persistent")
    server = create_server(config, evaluator=evaluator)
    out: dict[str, Any] = {}
    calls = 0
    async with Client(server) as client:
        await evaluator.start_pool()
        await evaluator.wait_pool_ready()
        for name, (reference, candidate) in tasks.items():
            t0 = time.monotonic()
            begun = await client.call_tool("start_task", {"reference": reference, "name": f"verify_sizes_{name}",
                                                          "k_seeds": 1})
            if begun.is_error:
                raise RuntimeError(f"start_task {name} failed: {begun.content[0].text[:500]}")
            tid = begun.structured_content["task_id"]
            start_task_s = round(time.monotonic() - t0, 2)
            rows: dict[str, list] = {"warmup": [], "measured": []}
            for series, n in (("warmup", 0 if quick else 1), ("measured", n_calls)):  # quick: no timing to warm
                for _ in range(n):
                    calls += 1
                    t1 = time.monotonic()
                    result = await client.call_tool("verify", {"task_id": tid,
                                                               "source": candidate + f"\n# call {calls}\n"})
                    wall = time.monotonic() - t1
                    if result.is_error:
                        raise RuntimeError(f"verify {name} failed through MCP: {result.content[0].text[:500]}")
                    rows[series].append(call_row(result.structured_content, wall))
                    print(f"  {name} {series}: {rows[series][-1]}", flush=True)  # a cut run keeps its calls
            summary = task_summary(rows["measured"])
            out[name] = {"start_task_s": start_task_s, "summary": summary, "calls": rows}
            print(f"{name:<13} p50 wall {summary['p50_wall_s']} s = compile {summary['p50_triton_compile_s']} + "
                  f"candidate GPU <= {summary['p50_candidate_gpu_s_at_most']} + overhead "
                  f"{summary['p50_overhead_s']} s (target <= {TARGET_OVERHEAD_S}); candidate "
                  f"{summary['candidate_median_ms']} ms; all correct: {summary['all_correct']}", flush=True)
    return {"what": "verify wall minus the candidate's compile and GPU time, per problem size, persistent judge",
            "quick": quick, "target_p50_overhead_s": TARGET_OVERHEAD_S, "n_calls": n_calls,
            "meets_target": all((t["summary"]["p50_overhead_s"] or 1e9) <= TARGET_OVERHEAD_S for t in out.values()),
            "tasks": out}


def suite_verify_sizes(out: Path, quick: bool) -> dict[str, Any]:
    """verify's overhead (wall - compile - candidate GPU time) on a GEMM, level1/23 Softmax at full size and a 2 GiB
    element-wise task, persistent judge (target p50 <= 1.5 s each)"""
    with tempfile.TemporaryDirectory(prefix="egg-verify-sizes-") as tmp:
        return asyncio.run(measure(Path(tmp), quick, n_calls=1 if quick else 4))


if __name__ == "__main__":  # one suite's tasks and call count (the suite runs all three, 4 calls each)
    import argparse
    import json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--tasks", default="", help="comma-separated subset of gemm,softmax_full,relu_2gb")
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="egg-verify-sizes-") as tmp:
        result = asyncio.run(measure(Path(tmp), args.quick, args.calls, [t for t in args.tasks.split(",") if t]))
    args.out.write_text(json.dumps(result, indent=1))
