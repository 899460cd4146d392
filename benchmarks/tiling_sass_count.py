"""SASS instructions per element of the bias+GELU tiling kernel, compiled for sm_90 on the CPU (no GPU).

    python3 benchmarks/tiling_sass_count.py [--out benchmarks/results/tiling/sass_bias_gelu.json]

Where the stream model's erf cost comes from (tiling/costs.py `_FUNCTION_OPS`): benchmarks/tiling_kernels/bias_gelu.py
(bf16, erf GELU) and the same kernel with the GELU removed (y = x + bias) are compiled with `compile_sm90` of
benchmarks/tiling_compile_study.py at a few tile shapes; per config the cubin's registers and the SASS instruction
count (NOPs excluded; the kernel has no loop, so each instruction issues once per thread) over elements per thread.
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "benchmarks/results/tiling/sass_bias_gelu.json"))
    args = parser.parse_args(argv)
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
