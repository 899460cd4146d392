"""The precision ladder judged at the output, checked against real kernels on the GPU.

    python3 benchmarks/precision_paths.py OUT_DIR [--smoke] [--problems a,b]

Three GEMM-with-epilogue problems at fp32 atol = rtol = 1e-4, where the ladder's answer differs:
  * gemm_gelu_softmax (benchmarks/problems/epilogue/): the softmax damps the GEMM's error, TF32 is admissible;
  * gemm_small_activations (same folder): |x| ~ 1e-5, TF32 fails and an fp16 hi/lo split loses its low halves;
  * kb76_gemm_add_relu (benchmarks/problems/kernelbench/76): TF32 fails, a compensated fp16 split passes.
For each, the real server in-process (`mcp.Client(create_server(...))`, calibration on first GPU use, as a user gets
it): start_task and generate_seeds give the brief, whose ladder lines and "fastest admissible compute path" are
recorded; then one Triton GEMM per compute path (IEEE fp32, 3xTF32, fp16 and bf16 splits, TF32, bf16, fp16), the
epilogue fused (GELU + softmax in a row kernel), each verified by the server: verdict, the error as a share of the
tolerance, the time.
Checks per problem: every path the ladder calls admissible is `correct` for real (the ladder's 4x margin allows the
converse); the fastest admissible path named by the brief is the expected one; among the `correct` kernels the
fastest admissible path's is within 10 % of the fastest; no verify text says "at the roof" for a kernel on a slower
path than the fastest admissible one, nor "below the floor".
Writes OUT_DIR/precision_paths.json; exits non-zero when a check fails. --smoke: the CPU interpreter, tiny sizes,
the paths the interpreter runs (no bf16): the plumbing only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.guidance_suite import Steps, floor_texts, verdict_problems, wait_for_calibration  # noqa: E402

PROBLEMS_DIR = REPO / "benchmarks" / "problems"
PATH_CODES = {"fp32": 0, "tf32x3": 1, "tf32": 2, "fp16x3": 3, "bf16x3": 4, "bf16": 5, "fp16": 6}
SMOKE_PATHS = ("fp32", "tf32x3", "fp16x3")  # the interpreter has no bf16 (and no TF32: it computes in fp32)
TF32_AT_OUTPUT = {"gemm_gelu_softmax": True, "gemm_small_activations": False, "kb76_gemm_add_relu": False}
"""What the problem is in the suite for: TF32 admissible at the output, or not (the brief's ladder must say so)."""
FASTEST_SLACK = 1.10

# problem -> (reference file, ModelNew body using triton_mm, expected fastest admissible paths, smoke sizes)
PROBLEMS: dict[str, tuple[str, str, set[str], dict[str, Any]]] = {
    "gemm_gelu_softmax": ("epilogue/gemm_gelu_softmax.py", '''
class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return triton_gelu_softmax(triton_mm(x, self.linear.weight, bias=self.linear.bias))
''', {"tf32", "bf16"}, {"batch_size": 16, "in_features": 64, "out_features": 48}),
    "gemm_small_activations": ("epilogue/gemm_small_activations.py", '''
class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.scale = scale

    def forward(self, x):
        return triton_mm(x, self.gemm.weight, scale=self.scale, relu=True)
''', {"bf16x3", "tf32x3"}, {"batch_size": 16, "in_features": 64, "out_features": 48}),
    "kb76_gemm_add_relu": ("kernelbench/76_Gemm_Add_ReLU.py", '''
class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return triton_mm(x, self.gemm.weight, bias=self.bias, relu=True)
''', {"fp16x3"}, {"batch_size": 16, "in_features": 64, "out_features": 48}),
}

GEMM = '''"""y = x @ w.T by one compute path (PATH), fp32 accumulation; the epilogue fused or in a row kernel."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

PATH = {code}  # 0 IEEE fp32, 1 3xTF32, 2 TF32, 3 fp16 hi/lo split (3 products), 4 bf16 split, 5 bf16, 6 fp16
BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, NUM_WARPS, NUM_STAGES = {blocks}


@triton.jit
def _split_dot(a, b, acc, DT: tl.constexpr):
    a_hi = a.to(DT)
    b_hi = b.to(DT)
    a_lo = (a - a_hi.to(tl.float32)).to(DT)
    b_lo = (b - b_hi.to(tl.float32)).to(DT)
    p = tl.dot(a_hi, b_lo)  # each K step's three products summed apart, then added: chained through the running
    p = tl.dot(a_lo, b_hi, p)  # acc, the tensor cores' truncating accumulation gave 10-50x the error at K 4096+
    p = tl.dot(a_hi, b_hi, p)
    return acc + p


@triton.jit
def mm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, scale, PATH: tl.constexpr, HAS_BIAS: tl.constexpr,
              RELU: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % group_m
    pid_n = (pid % group) // group_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        kk = k * BLOCK_K + rk
        a = tl.load(x_ptr + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < K), other=0.0)
        if PATH == 0:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        elif PATH == 1:
            acc = tl.dot(a, b, acc, input_precision="tf32x3")
        elif PATH == 2:
            acc = tl.dot(a, b, acc, input_precision="tf32")
        elif PATH == 3:
            acc = _split_dot(a, b, acc, tl.float16)
        elif PATH == 4:
            acc = _split_dot(a, b, acc, tl.bfloat16)
        elif PATH == 5:
            acc = tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16), acc)
        else:
            acc = tl.dot(a.to(tl.float16), b.to(tl.float16), acc)
    acc = acc * scale
    if HAS_BIAS:
        acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    if RELU:
        acc = tl.maximum(acc, 0.0)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def gelu_softmax_kernel(y_ptr, out_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(y_ptr + row * N + cols, mask=cols < N, other=0.0)
    v = 0.5 * v * (1.0 + tl.math.erf(v * 0.7071067811865476))
    v = tl.where(cols < N, v, float("-inf"))
    e = tl.exp(v - tl.max(v, axis=0))
    tl.store(out_ptr + row * N + cols, e / tl.sum(e, axis=0), mask=cols < N)


def triton_mm(x, w, bias=None, scale=1.0, relu=False):
    """y = epilogue(scale * (x @ w.T) + bias): bias and ReLU optional, fused into the GEMM."""
    x = x.contiguous()
    M, K = x.shape
    N = w.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=torch.float32)
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    mm_kernel[grid](x, w, bias if bias is not None else y, y, M, N, K, float(scale), PATH=PATH,
                    HAS_BIAS=bias is not None, RELU=relu, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                    GROUP_M=GROUP_M, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    return y


def triton_gelu_softmax(y):
    out = torch.empty_like(y)
    M, N = y.shape
    gelu_softmax_kernel[(M,)](y, out, N, BLOCK=triton.next_power_of_2(N), num_warps=8)
    return out
'''
BLOCKS = {"fp32": (128, 128, 32, 8, 8, 3), "tf32x3": (128, 128, 32, 8, 8, 3), "tf32": (128, 128, 32, 8, 4, 4),
          "fp16x3": (128, 128, 32, 8, 8, 3), "bf16x3": (128, 128, 32, 8, 8, 3), "bf16": (128, 128, 32, 8, 4, 4),
          "fp16": (128, 128, 32, 8, 4, 4)}
SMOKE_BLOCKS = (16, 16, 16, 2, 4, 2)


def candidate(problem: str, path: str, smoke: bool) -> str:
    blocks = SMOKE_BLOCKS if smoke else BLOCKS[path]
    return GEMM.format(code=PATH_CODES[path], blocks=", ".join(map(str, blocks))) + PROBLEMS[problem][1]


LADDER = re.compile(r"^[\s-]*(\w+): (PASSES|fails)\b(.*)$")


def ladder_lines(brief: str) -> dict[str, dict[str, Any]]:
    """The brief's ladder rungs by path: admissible, the line as the client reads it."""
    out: dict[str, dict[str, Any]] = {}
    for line in brief.splitlines():
        m = LADDER.match(line)
        if m:
            out.setdefault(m.group(1), {"admissible": m.group(2) == "PASSES", "line": line.strip()})
    return out


async def run_problem(client, name: str, smoke: bool, deadline: float) -> dict[str, Any]:
    ref_file, _, expected, smoke_sizes = PROBLEMS[name]
    overrides = smoke_sizes if smoke else None
    record: dict[str, Any] = {"problem": name, "reference": f"benchmarks/problems/{ref_file}", "size_overrides":
                              overrides, "tolerance": "fp32 atol=rtol=1e-4", "expected_fastest": sorted(expected),
                              "checks": {}}
    steps = Steps(client, record, deadline)
    started, _ = await steps.call("start_task", "start_task", optional=False,
                                  reference=(PROBLEMS_DIR / ref_file).read_text(), name=name, k_seeds=2,
                                  dtype="float32", atol=1e-4, rtol=1e-4, size_overrides=overrides)
    if started is None:
        record["error"] = steps.failed()[0]
        return record
    tid = started["task_id"]
    seeds, _ = await steps.call("seed_brief", "generate_seeds", task_id=tid)
    brief = started.get("brief", "") + "\n" + (seeds or {}).get("brief", "")
    m = re.search(r"fastest admissible compute path for dots is (\w+)", brief)
    fastest = m.group(1) if m else None
    rungs = ladder_lines(brief)
    record.update(fastest_admissible=fastest, ladder=rungs,
                  brief_lines=[ln.strip() for ln in brief.splitlines() if "fastest admissible" in ln
                               or ln.strip().startswith("Use ")])
    kernels: dict[str, Any] = {}
    problems: list[str] = []
    for path in (SMOKE_PATHS if smoke else PATH_CODES):
        verified, _ = await steps.call(f"verify_{path}", "verify", task_id=tid, source=candidate(name, path, smoke),
                                       note=f"{path} GEMM")
        if verified is None:
            kernels[path] = {"verdict": None}
            continue
        result = verified.get("result") or {}
        share = result.get("error_share") or {}
        mismatch = result.get("mismatch") or {}
        entry = {"verdict": verified["verdict"], "time_ms": verified.get("time_ms"),
                 "speedup_vs_eager": verified.get("speedup_vs_eager"), "error_share": share or None,
                 "mismatch": {k: mismatch.get(k) for k in ("max_abs_diff", "max_rel_diff", "n_bad", "bad_fraction")
                              if k in mismatch} or None,
                 "summary": verified.get("summary", "")[:600]}
        texts = floor_texts(verified)
        problems += [f"{path}: {p}" for p in verdict_problems(texts, path, fastest)]
        kernels[path] = entry
    record["kernels"] = kernels
    admitted_but_wrong = [p for p, k in kernels.items()
                          if rungs.get(p, {}).get("admissible") and k["verdict"] not in ("correct", None)]
    correct = {p: k["time_ms"] for p, k in kernels.items() if k["verdict"] == "correct" and k.get("time_ms")}
    record["checks"]["admissible_paths_correct"] = not admitted_but_wrong and all(
        k["verdict"] is not None for k in kernels.values())
    record["checks"]["admitted_but_incorrect"] = admitted_but_wrong
    record["checks"]["fastest_is_expected"] = smoke or fastest in expected
    tf32 = rungs.get("tf32", {}).get("admissible")
    record["checks"]["tf32_rung_as_expected"] = smoke or tf32 == TF32_AT_OUTPUT[name]
    if not smoke and fastest in correct:
        record["checks"]["fastest_admissible_is_fastest_correct"] = (
            correct[fastest] <= FASTEST_SLACK * min(correct.values()))
    elif not smoke:
        record["checks"]["fastest_admissible_is_fastest_correct"] = False
    record["checks"]["verdict_problems"] = problems
    record["checks"]["no_false_floor_or_roof"] = not problems
    record["failed_steps"] = steps.failed()
    return record


async def run_all(workspace: Path, smoke: bool, names: list[str], max_wall_s: float) -> dict[str, Any]:
    from mcp import Client

    from egg_mcp.config import ServerConfig
    from egg_mcp.server import create_server

    server = create_server(ServerConfig(workspace=workspace, force_interpreter=smoke))
    service = server.egg_service
    out: dict[str, Any] = {"problems": []}
    async with Client(server) as client:
        deadline = time.monotonic() + max_wall_s
        await wait_for_calibration(service, out)
        out["ceilings"] = dict(service.gpu.provenance) if service.gpu else None
        out["peak_flops"] = dict(service.gpu.peak_flops) if service.gpu else None
        for name in names:
            try:
                out["problems"].append(await run_problem(client, name, smoke, deadline))
            except Exception as exc:  # noqa: BLE001 - recorded; the other problems still run
                out["problems"].append({"problem": name, "error": f"{type(exc).__name__}: {exc}"[:2000]})
    out["all_checks_pass"] = bool(out["problems"]) and all(
        "error" not in p and all(v for k, v in p["checks"].items() if k not in ("verdict_problems",
                                                                                "admitted_but_incorrect"))
        for p in out["problems"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny sizes: the plumbing only")
    parser.add_argument("--problems", default=",".join(PROBLEMS))
    parser.add_argument("--max-wall-s", type=float, default=400.0)
    args = parser.parse_args(argv)
    names = [n for n in args.problems.split(",") if n]
    unknown = [n for n in names if n not in PROBLEMS]
    if unknown:
        parser.error(f"unknown problems {unknown}; choose from {', '.join(PROBLEMS)}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    result = asyncio.run(run_all(Path(tempfile.mkdtemp(prefix="egg-precision-ws-")), args.smoke, names,
                                 args.max_wall_s))
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    (args.out_dir / "precision_paths.json").write_text(json.dumps(result, indent=1))
    for p in result["problems"]:
        print(json.dumps({k: p.get(k) for k in ("problem", "fastest_admissible", "expected_fastest", "checks",
                                                 "error", "failed_steps")}))
        for path, k in (p.get("kernels") or {}).items():
            rung = (p.get("ladder") or {}).get(path, {})
            print(f"  {path:7s} ladder {'PASS' if rung.get('admissible') else 'fail' if rung else '?':4s} "
                  f"real {k.get('verdict')!s:10s} {k.get('time_ms')!s:>22s} ms share {k.get('error_share')}")
    print(f"all checks pass: {result['all_checks_pass']}; wall {result['wall_s']} s")
    return 0 if result["all_checks_pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
