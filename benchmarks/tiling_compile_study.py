"""Why rowsum_a ranks badly: compile its configs for sm_90 on the CPU (no GPU) and test Little's law on them.

    python3 benchmarks/tiling_compile_study.py --out OUT.json
    (recorded: benchmarks/results/archive/tiling/compile_study_rowsum_a.json)

Triton compiles a kernel to PTX and cubin without a GPU (ptxas ships with it); the cubin's register count and
the SASS of the column loop are read with the bundled cuobjdump. For every config of the stored H200 run of
rowsum_a (benchmarks/results/archive/tiling/tiling_bench_2026-11-30_layernorm_a_rowsum_a.json; H200 times, triton
3.6 there, this machine's Triton here) it records: registers here vs on the H200, the global loads in the loop body
per thread (LDG count and bytes: LLVM unrolls small loop bodies, so those loads are in flight together) and
resident warps per SM.
The per-warp streaming rate of the tiling model (tiling/costs.py WARP_STREAM_BPS) is derived here:
`per_warp_rate_gbs`, the median over unspilled configs with <= 16 resident warps per SM of per-SM bytes / H200
time / resident warps. Then Little's law: bytes in flight per SM = resident threads x loop bytes per thread; the time it predicts
(bandwidth share 4.3 TB/s / 132 SMs, latency 0.25-1.5 us) is ranked against the H200 times, beside the rank by
resident warps alone. Offline: the times are the H200's; nothing here runs a kernel.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from egg_mcp.tiling.kernel_calls import spearman  # noqa: E402

STORED = REPO / "benchmarks" / "results" / "archive" / "tiling" / "tiling_bench_2026-11-30_layernorm_a_rowsum_a.json"
SIGNATURE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "n_rows": "i32", "n_cols": "i32", "stride_x": "i32",
             "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"}
DIVISIBLE = (0, 1, 2, 3, 4)  # what Triton's launcher specialises at these sizes (pointers, 8192, 8192, 8192)
SM_COUNT, SHARE = 132, 4.3e12 / 132  # H200 SMs; the DRAM lead of hardware.py split evenly


def _bin(tool: str) -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", tool)


def compile_sm90(fn, constexprs: dict, num_warps: int) -> tuple[int | None, str]:
    """(registers, SASS) of one config compiled for sm_90 on this machine."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src = ASTSource(fn, signature=SIGNATURE, constexprs=constexprs,
                    attrs={(i,): [["tt.divisibility", 16]] for i in DIVISIBLE})
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(kernel.asm["cubin"])
    try:
        usage = subprocess.run([_bin("cuobjdump"), "--dump-resource-usage", f.name], capture_output=True,
                               text=True, timeout=60).stdout
        sass = subprocess.run([_bin("cuobjdump"), "-sass", f.name], capture_output=True, text=True, timeout=60).stdout
    finally:
        os.unlink(f.name)
    regs = re.search(r"REG:(\d+)", usage)
    return (int(regs.group(1)) if regs else None), sass


def loop_loads(sass: str) -> tuple[int, int]:
    """(LDG instructions, bytes per thread) in the largest backward-branch loop body of the SASS."""
    lines = [ln.strip() for ln in sass.splitlines() if re.match(r"\s*/\*[0-9a-f]{4}\*/", ln)]
    addr = lambda ln: int(ln[2:6], 16)  # noqa: E731
    best = (0, 0)
    for ln in lines:
        m = re.search(r"BRA (0x[0-9a-f]+)", ln)
        if m and int(m.group(1), 16) < addr(ln):
            body = [x for x in lines if int(m.group(1), 16) <= addr(x) <= addr(ln)]
            widths = [re.search(r"LDG\.E(?:\.(\d+))?", x) for x in body if "LDG" in x]
            nbytes = sum(int(w.group(1)) // 8 if w.group(1) else 4 for w in widths if w)
            if nbytes > best[1]:
                best = (len(widths), nbytes)
    return best


def resident_warps(config: dict, regs: int, n_rows: int) -> float:
    threads = 32 * config["NUM_WARPS"]
    ctas = min(32, 2048 // threads, 65536 // (-(-max(regs, 1) // 8) * 8 * threads))
    return min(ctas, math.ceil(n_rows / config["BLOCK_M"]) / SM_COUNT) * config["NUM_WARPS"]


def study(limit: int | None = None) -> dict:
    spec = importlib.util.spec_from_file_location("row_sum_case", REPO / "benchmarks" / "tiling_kernels" / "row_sum.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    record = next(c for c in json.loads(STORED.read_text())["cases"] if c["case"] == "rowsum_a")
    n_rows, n_cols = record["dims"]["n_rows"], record["dims"]["n_cols"]
    rows = []
    for c in record["configs"][:limit]:
        if c.get("median_ms") is None:
            continue
        cfg = c["config"]
        regs, sass = compile_sm90(module.row_sum_kernel, {"BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"]},
                                  cfg["NUM_WARPS"])
        ldg, nbytes = loop_loads(sass)
        rows.append({"config": cfg, "h200_ms": c["median_ms"], "h200_registers": c.get("registers"),
                     "h200_spills": c.get("spills"),
                     "registers_here": regs, "loop_ldg": ldg, "loop_bytes_per_thread": nbytes,
                     "resident_warps_per_sm": round(resident_warps(cfg, regs or 32, n_rows), 2)})
    times = [r["h200_ms"] for r in rows]
    per_sm_bytes = n_rows * n_cols * 4 / SM_COUNT
    littles = {}
    for latency_us in (0.25, 0.5, 1.0, 1.5):
        predicted = [per_sm_bytes / min(SHARE, r["resident_warps_per_sm"] * 32 * max(r["loop_bytes_per_thread"], 4)
                                        / (latency_us * 1e-6)) for r in rows]
        littles[f"{latency_us}us"] = spearman(predicted, times)
    # the per-warp streaming rate where warps, not the SM's share, limit: unspilled configs with <= 16 resident
    # warps per SM (tiling/costs.py WARP_STREAM_BPS)
    limited = sorted(per_sm_bytes / (r["h200_ms"] * 1e-3) / r["resident_warps_per_sm"] for r in rows
                     if not r["h200_spills"] and r["resident_warps_per_sm"] <= 16)
    median = (limited[len(limited) // 2] + limited[(len(limited) - 1) // 2]) / 2 if limited else None
    return {
        "per_warp_rate_gbs": round(median / 1e9, 3) if median else None, "per_warp_rate_configs": len(limited),
        "triton_here": __import__("triton").__version__,
        "h200_run_triton": "not recorded in the run; benchmarks/results/archive/h200_2026-11-30/README.md names 3.6 "
                           "for those runs",
        "git_commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                     text=True).stdout.strip(),
        "label": "offline: H200 times from the stored run; registers and SASS compiled for sm_90 on this CPU machine",
        "stored_run": str(STORED.relative_to(REPO)), "configs": len(rows),
        "registers_equal_h200": sum(1 for r in rows if r["registers_here"] == r["h200_registers"]),
        "registers_within_8": sum(1 for r in rows if r["registers_here"] is not None and r["h200_registers"] is not None
                                  and abs(r["registers_here"] - r["h200_registers"]) <= 8),
        "rho_littles_law_bytes_in_flight": littles,
        "rho_fewer_resident_warps": spearman([-r["resident_warps_per_sm"] for r in rows], times),
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output JSON (a new file, named by date and commit)")
    parser.add_argument("--limit", type=int, default=None, help="first N configs only (a quick check)")
    args = parser.parse_args(argv)
    result = study(args.limit)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
