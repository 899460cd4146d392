"""Suite `verify_latency` (benchmarks/run.py): verify's wall time through the real MCP server, one-shot
judge vs persistent judge, measured in one run (issue 12).

Task: a 2048x4096 @ 4096x4096 fp32 GEMM (reference: torch.matmul in KernelBench format, inputs scaled
so |C| ~ 1); candidate: a plain Triton GEMM with an IEEE fp32 `tl.dot` (FMA, no TF32: correct at the
default 1e-4 tolerance, and a multi-millisecond kernel like the issue's 9.7 ms one; the reported
median_ms says what it was). Every verify goes
through `mcp.Client(server)` in-process (the MCP tool `verify`, as tests/mcp_driver.py drives it); a
distinct comment per call keeps the verify cache out of it. One server, one task, one workspace; the
evaluator behind it is a switch between two WorkerEvaluators (judge='oneshot' and 'persistent'), so both
paths share the task's baselines. Per path: one warm-up verify (uncounted), N back to back, then N_THINK
calls with >= THINK_S idle before each (the two paths alternate, with >= GAP_S after the other path's
call so that its background work, a one-shot spare's refill, does not overlap).

Reported per call: client wall, the engine's server_phase_s (and `unaccounted`), the judge's phase_s,
the MCP/service share (client wall - engine total), the candidate's timing (median, CV); per path: p50s
and phase sums; across paths: the candidate's median ratio persistent/oneshot (an A/A: same kernel).
`--quick`: CPU interpreter, 32x32 shapes, N=2, one think call of 1 s: proves the suite runs.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

REFERENCE = '''import torch
import torch.nn as nn

M = {m}
K = {k}
N = {n}


class Model(nn.Module):
    """C = A @ B in fp32."""

    def forward(self, A, B):
        return torch.matmul(A, B)


def get_inputs():
    # scaled so |C| ~ 1: the default tolerance (1e-4) is absolute, and any two fp32 summation orders of a
    # K=4096 dot with unit-variance inputs differ by ~1e-4
    return [torch.randn(M, K) * 0.125, torch.randn(K, N) * 0.125]


def get_init_inputs():
    return []
'''

CANDIDATE = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gemm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * sam + (k0 + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision=PREC)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def forward(self, A, B):
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), device=A.device, dtype=torch.float32)
        grid = (triton.cdiv(M, {bm}), triton.cdiv(N, {bn}))
        gemm_kernel[grid](A, B, C, M, N, K, A.stride(0), A.stride(1), B.stride(0), B.stride(1),
                          C.stride(0), C.stride(1), BM={bm}, BN={bn}, BK={bk}, PREC="{prec}", num_warps=4,
                          num_stages=3)
        return C
'''

FULL = {"m": 2048, "k": 4096, "n": 4096, "n_b2b": 6, "n_think": 4, "think_s": 15.0,
        "gap_s": 6.0, "tile": {"bm": 128, "bn": 128, "bk": 32, "prec": "ieee"}}
QUICK = {"m": 32, "k": 32, "n": 32, "n_b2b": 2, "n_think": 1, "think_s": 1.0,
         "gap_s": 0.5, "tile": {"bm": 16, "bn": 16, "bk": 16, "prec": "ieee"}}
PATHS = ("oneshot", "persistent")
LIGHT_TILE = {"bm": 64, "bn": 64, "bk": 32, "prec": "ieee"}
"""The second kernel (suite verify_latency_light, persistent judge only): the same GEMM with 64x64x32 tiles.
Its own compile is 0.5-0.7 s against 2.4-2.8 s for 128x128x32, and it runs at 1.6 ms against 2.0
(benchmarks/results/archive/h200_2026-12-01_b4a4599-ae198ae/latency_probe.json): how much of a verify is the kernel's
own compile."""


class SwitchEvaluator:
    """The server's evaluator: one of two WorkerEvaluators, chosen by `current` (everything delegated)."""

    def __init__(self, evaluators: dict[str, Any]):
        self.evaluators = evaluators
        self.current = next(iter(evaluators))

    def __getattr__(self, name: str):
        return getattr(self.evaluators[self.current], name)

    async def aclose(self) -> None:
        for ev in self.evaluators.values():
            await ev.aclose()


def _p50(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def _row(structured: dict[str, Any], wall: float) -> dict[str, Any]:
    result = structured["result"]
    phases = result.get("server_phase_s") or {}
    timing = result.get("timing") or {}
    return {"wall_s": round(wall, 3), "verdict": structured["verdict"], "cached": structured["cached"],
            "engine_total_s": phases.get("total"), "unaccounted_s": phases.get("unaccounted"),
            "mcp_and_service_s": round(wall - phases["total"], 3) if "total" in phases else None,
            "server_phase_s": phases, "phase_s": result.get("phase_s"), "judge": result.get("judge"),
            "median_ms": timing.get("median_ms"), "cv": timing.get("cv"), "timing_method": timing.get("method"),
            "timing_remeasured": timing.get("remeasured") or 0, "disturbed_cvs": timing.get("disturbed_cvs"),
            "summary": structured["summary"][:200] if structured["verdict"] != "correct" else None}


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    sums: dict[str, float] = {}
    for row in rows:
        for key, value in {**(row["server_phase_s"] or {}), **{f"judge.{k}": v for k, v in (row["phase_s"] or {}).items()}}.items():
            sums[key] = round(sums.get(key, 0.0) + value, 3)
    medians = [r["median_ms"] for r in rows if r["median_ms"]]
    return {"n": len(rows), "p50_wall_s": _p50([r["wall_s"] for r in rows]),
            "max_wall_s": max((r["wall_s"] for r in rows), default=None),
            "p50_mcp_and_service_s": _p50([r["mcp_and_service_s"] for r in rows if r["mcp_and_service_s"] is not None]),
            # the part of compile_first_trial that is Triton compiling the candidate (the runner's own clock,
            # compile_clock.py: untrusted, shown to split the phase) and the wall without it
            "p50_runner_reported_triton_compile_s": _p50([r["judge"]["runner_reported_triton_compile_s"] for r in rows
                                                          if (r["judge"] or {}).get("runner_reported_triton_compile_s")
                                                          is not None]),
            "p50_wall_minus_triton_compile_s": _p50([r["wall_s"] - r["judge"]["runner_reported_triton_compile_s"]
                                                     for r in rows if (r["judge"] or {}).get(
                                                         "runner_reported_triton_compile_s") is not None]),
            "max_abs_unaccounted_s": max((abs(r["unaccounted_s"] or 0) for r in rows), default=None),
            # calls whose runner found launcher stubs built ahead by the judge's hint (launchers.py; runner-reported)
            "calls_with_timing_remeasured": sum(1 for r in rows if r.get("timing_remeasured")),
            "calls_with_launchers_built_ahead": sum(1 for r in rows if (((r["judge"] or {}).get(
                "runner_reported_launchers") or {}).get("built") or 0) >= 1),
            "phase_sums_s": sums, "all_correct": all(r["verdict"] == "correct" for r in rows),
            "candidate_median_ms": _p50(medians),
            "candidate_median_cv_across_calls": (round(statistics.pstdev(medians) / statistics.mean(medians), 5)
                                                 if len(medians) > 1 else None),
            "candidate_max_cv_within_call": max((r["cv"] for r in rows if r["cv"] is not None), default=None)}


async def _measure(workdir: Path, quick: bool, tile: dict[str, Any] | None = None,
                   paths: tuple[str, ...] = PATHS) -> dict[str, Any]:
    from mcp import Client

    from egg_mcp.config import ServerConfig
    from egg_mcp.evaluation.engine import WorkerEvaluator
    from egg_mcp.server import create_server

    shape = dict(QUICK if quick else FULL)
    if tile is not None and not quick:
        shape["tile"] = tile
    reference = REFERENCE.format(m=shape["m"], k=shape["k"], n=shape["n"])
    config = ServerConfig(workspace=workdir / "ws", force_interpreter=quick)
    evaluators = {path: WorkerEvaluator(scratch_dir=workdir / f"scratch-{path}", force_interpreter=quick, judge=path)
                  for path in paths}
    switch = SwitchEvaluator(evaluators)
    server = create_server(config, evaluator=switch)
    calls = 0
    last_end = {path: time.monotonic() for path in paths}
    rows: dict[str, dict[str, list]] = {p: {"warmup": [], "back_to_back": [], "think": []} for p in paths}

    async def verify(client, tid: str, path: str, series: str) -> None:
        nonlocal calls
        calls += 1
        switch.current = path
        source = CANDIDATE.format(**shape["tile"]) + f"\n# call {calls} ({path}, {series})\n"
        t0 = time.monotonic()
        result = await client.call_tool("verify", {"task_id": tid, "source": source})
        wall = time.monotonic() - t0
        if result.is_error:
            raise RuntimeError(f"verify failed through MCP: {result.content[0].text[:500]}")
        rows[path][series].append(_row(result.structured_content, wall))
        last_end[path] = time.monotonic()

    started = time.monotonic()
    async with Client(server) as client:
        for ev in evaluators.values():
            await ev.start_pool()
        for ev in evaluators.values():
            await ev.wait_pool_ready()
        begun = await client.call_tool("start_task", {"reference": reference, "name": "verify_latency_gemm",
                                                      "k_seeds": 1})
        if begun.is_error:
            raise RuntimeError(f"start_task failed: {begun.content[0].text[:500]}")
        tid = begun.structured_content["task_id"]
        setup_s = round(time.monotonic() - started, 2)
        for path in paths:
            await verify(client, tid, path, "warmup")  # baselines (first path only), judge binding, compile
            await asyncio.sleep(shape["think_s"] / 2)
        for path in paths:
            for _ in range(shape["n_b2b"]):
                await verify(client, tid, path, "back_to_back")
            await asyncio.sleep(shape["think_s"] / 2)  # this path's background work ends before the other's
        for _ in range(shape["n_think"]):
            for path in paths:
                # >= think_s since this path's last call, and a gap after the other path's call (its
                # background work: a one-shot spare refill) so the two never overlap
                since_own = time.monotonic() - last_end[path]
                since_any = time.monotonic() - max(last_end.values())
                await asyncio.sleep(max(shape["think_s"] - since_own, shape["gap_s"] - since_any, 0.0))
                await verify(client, tid, path, "think")
    measured = {path: {series: {"summary": _summary(r), "calls": r} for series, r in per.items()}
                for path, per in rows.items()}
    ratio = None
    if "oneshot" in paths and "persistent" in paths:
        m_one, m_per = (_p50([r["median_ms"] for s in ("back_to_back", "think") for r in measured[p][s]["calls"]
                              if r["median_ms"]]) for p in ("oneshot", "persistent"))
        if m_one and m_per:
            ratio = round(m_per / m_one, 4)
    return {
        "what": "verify wall time through mcp.Client(server) in-process, one-shot vs persistent judge",
        "shape": {k: shape[k] for k in ("m", "k", "n")}, "tile": shape["tile"], "quick": quick,
        "setup_s": setup_s, "think_s": shape["think_s"],
        "p50_wall_s": {path: {s: measured[path][s]["summary"]["p50_wall_s"] for s in ("back_to_back", "think")}
                       for path in paths},
        "target_p50_s": 4.0,
        "persistent_meets_target": all((measured["persistent"][s]["summary"]["p50_wall_s"] or 1e9) <= 4.0
                                       for s in ("back_to_back", "think")),
        "candidate_aa_persistent_over_oneshot": ratio,
        "paths": measured,
    }


def suite_verify_latency(out: Path, quick: bool, light: bool = False) -> dict[str, Any]:
    """verify wall time through MCP: one-shot vs persistent judge, back to back and with think time (issue 12);
    light: the 64x64x32 kernel (LIGHT_TILE), persistent judge only"""
    with tempfile.TemporaryDirectory(prefix="egg-verify-latency-") as tmp:
        if light:
            result = asyncio.run(_measure(Path(tmp), quick, LIGHT_TILE, ("persistent",)))
        else:
            result = asyncio.run(_measure(Path(tmp), quick))
    for path in result["paths"]:
        for series in ("back_to_back", "think"):
            s = result["paths"][path][series]["summary"]
            print(f"{path:<10} {series:<12} p50 {s['p50_wall_s']} s (max {s['max_wall_s']}), mcp+service p50 "
                  f"{s['p50_mcp_and_service_s']} s, |unaccounted| <= {s['max_abs_unaccounted_s']} s, "
                  f"candidate {s['candidate_median_ms']} ms cv(calls) {s['candidate_median_cv_across_calls']}, "
                  f"Triton compile p50 {s['p50_runner_reported_triton_compile_s']} s (runner-reported), wall without "
                  f"it p50 {s['p50_wall_minus_triton_compile_s']} s")
    print(f"candidate A/A persistent/oneshot: {result['candidate_aa_persistent_over_oneshot']}")
    return result
