"""SASS instructions per element of the bias+GELU tiling kernel, compiled for sm_90 on the CPU (no GPU).

    python3 benchmarks/tiling_sass_count.py --out OUT.json
    python3 benchmarks/tiling_sass_count.py --kb76 --out OUT.json

(the recorded outputs: benchmarks/results/archive/tiling/sass_bias_gelu.json and compile_kb76_tf32x3.json)

Where the stream model's erf cost comes from (tiling/costs.py `_FUNCTION_OPS`): benchmarks/tiling_kernels/bias_gelu.py
(bf16, erf GELU) and the same kernel with the GELU removed (y = x + bias) are compiled with `compile_sm90` of
benchmarks/tiling_compile_study.py at a few tile shapes; per config the cubin's registers and the SASS instruction
count (NOPs excluded; the kernel has no loop, so each instruction issues once per thread) over elements per thread.
`--kb76`: the registers and spill stack ptxas gives each config of KernelBench 76's tf32x3 GEMM+bias+ReLU that the
H200 run benchmarks/results/archive/h200_2026-12-01_b4a4599-ae198ae/tiling_search measured, beside its measured time
and the model's register count (tiling/costs.py dot_regs): what the analytic count misses.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import tiling_compile_study as tcs  # noqa: E402

KERNEL = REPO / "benchmarks" / "tiling_kernels" / "bias_gelu.py"
GELU = "y = 0.5 * v * (1.0 + tl.math.erf(v * 0.7071067811865476))"
SIGNATURE = {"x_ptr": "*bf16", "b_ptr": "*bf16", "y_ptr": "*bf16", "n_rows": "i32", "n_cols": "i32",
             "stride_x": "i32", "stride_y": "i32", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"}
CONFIGS = [(4, 1024, 4), (16, 128, 2), (1, 2048, 1), (32, 512, 8), (4, 512, 8), (1, 64, 1)]


def _load(source: str, name: str):
    path = Path(tempfile.mkdtemp(prefix="egg_sass_")) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.bias_gelu_kernel


def count(fn, bm: int, bn: int, warps: int) -> dict:
    regs, sass = tcs.compile_sm90(fn, {"BLOCK_M": bm, "BLOCK_N": bn}, warps)
    instructions = sum(1 for line in sass.splitlines()
                       if re.match(r"\s+/\*[0-9a-f]{4}\*/\s+\S", line) and "NOP" not in line)
    per_thread = bm * bn / (32 * warps)
    return {"config": {"BLOCK_M": bm, "BLOCK_N": bn, "NUM_WARPS": warps}, "registers": regs,
            "sass_instructions": instructions, "elements_per_thread": per_thread,
            "instructions_per_element": round(instructions / per_thread, 2)}


SEARCH_RUN = REPO / "benchmarks/results/archive/h200_2026-12-01_b4a4599-ae198ae/tiling_search/tiling_search.json"
KB76 = REPO / "benchmarks/problems/kernelbench/gemm_add_relu_triton.py"


def kb76_registers() -> dict:
    import subprocess

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from egg_mcp.tiling.costs import dot_regs

    spec = importlib.util.spec_from_file_location("egg_kb76", KB76)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    signature = {"x_ptr": "*fp32", "w_ptr": "*fp32", "b_ptr": "*fp32", "y_ptr": "*fp32", "M": "i32", "N": "i32",
                 "K": "i32", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr",
                 "GROUP_M": "constexpr"}
    record = next(c for c in json.loads(SEARCH_RUN.read_text())["cases"] if c["case"] == "kb76_gemm_epilogue")
    rows = []
    for r in record["configs"]:
        cfg = r["config"]
        src = ASTSource(module.gemm_add_relu_kernel, signature=signature,
                        constexprs={k: cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")},
                        attrs={(i,): [["tt.divisibility", 16]] for i in range(7)})
        kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                                options={"num_warps": cfg["NUM_WARPS"], "num_stages": cfg["NUM_STAGES"]})
        with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
            f.write(kernel.asm["cubin"])
        usage = subprocess.run([tcs._bin("cuobjdump"), "--dump-resource-usage", f.name], capture_output=True,
                               text=True, timeout=60).stdout
        Path(f.name).unlink()
        stack = re.search(r"STACK:(\d+)", usage)
        rows.append({"config": cfg, "measured_ms": r["measured_ms"], "registers": int(re.search(r"REG:(\d+)", usage)[1]),
                     "spill_stack_bytes": int(stack[1]) if stack else None,
                     "model_live_regs": round(dot_regs(cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"],
                                                        cfg["NUM_WARPS"], "tf32x3"))})
    rows.sort(key=lambda x: x["measured_ms"] or 1e9)
    return {"what": "kb76 tf32x3 configs compiled for sm_90 on the CPU (ptxas registers, spill stack) beside the "
                    "H200 times of " + str(SEARCH_RUN.relative_to(REPO)), "triton": triton.__version__,
            "configs": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output JSON (a new file, named by date and commit)")
    parser.add_argument("--kb76", action="store_true", help="KernelBench 76's tf32x3 GEMM configs instead")
    args = parser.parse_args(argv)
    if args.kb76:
        out = args.out
        result = kb76_registers()
        Path(out).write_text(json.dumps(result, indent=1) + "\n")
        for row in result["configs"]:
            print(row)
        return 0
    tcs.SIGNATURE, tcs.DIVISIBLE = SIGNATURE, (0, 1, 2, 3, 4, 5, 6)
    source = KERNEL.read_text()
    assert GELU in source, "bias_gelu.py changed: update GELU"
    kernels = {"bias_gelu": _load(source, "egg_bias_gelu"), "bias_add": _load(source.replace(GELU, "y = v"),
                                                                                  "egg_bias_add")}
    import triton

    result = {"what": "SASS instructions per element, compiled for sm_90 on the CPU (no kernel ran)",
              "triton": triton.__version__, "kernel": str(KERNEL.relative_to(REPO)),
              "variants": {name: [count(fn, *c) for c in CONFIGS] for name, fn in kernels.items()}}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
