"""What Triton's compiler makes of the guidance suite's tiling spaces: registers, spills and shared memory per
config, compiled for sm_90 on the CPU (no GPU; Triton ships ptxas and cuobjdump).

    python benchmarks/tiling_compile_guidance.py --out OUT.json
    (recorded: benchmarks/results/archive/tiling/compile_study_guidance.json)

Needs only `triton` (no torch): the kernels are lifted out of the candidate files with `ast`. Run it under the
Triton the H200 ran (3.6.0, guidance_6438ad0.json's provenance), e.g. from a venv with `pip install triton==3.6.0`.
For each kernel of egg-mcp's KernelBench candidates (mingpt_attention_triton.py: linear_kernel, attn_kernel;
gemm_add_relu_triton.py) and each config of its TUNING_SPACE: registers per thread, bytes spilled (stack), shared
memory Triton reports, and which MMA the SASS uses (HGMMA = wgmma, HMMA = mma.sync). The tiling model's
attention and tf32x3 register/shared-memory terms are checked against this file (tests/test_tiling_attention.py).
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KB = REPO / "benchmarks" / "problems" / "kernelbench"
ATTN_SIG = {"qkv_ptr": "*fp32", "o_ptr": "*fp32", "T": "i32", "H": "i32", "C": "i32", "HEAD_DIM": "i32",
            "sm_scale": "fp32", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_D": "constexpr"}
GEMM_SIG = {"x_ptr": "*fp32", "w_ptr": "*fp32", "b_ptr": "*fp32", "y_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32",
            "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr"}


def lift(path: Path, names: tuple[str, ...]) -> dict:
    """The named @triton.jit functions of a candidate file, defined in a module of their own (no torch)."""
    tree = ast.parse(path.read_text())
    keep = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    src = "import triton\nimport triton.language as tl\n\n" + "\n\n".join(ast.get_source_segment(path.read_text(), n)
                                                                       for n in keep)
    tmp = Path(tempfile.mkdtemp(prefix="egg_lift_")) / f"lifted_{path.stem}.py"
    tmp.write_text("\n".join(f"@triton.jit\n{line}" if line.startswith("def ") else line for line in src.splitlines()))
    import importlib.util

    spec = importlib.util.spec_from_file_location(tmp.stem, tmp)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {n: getattr(module, n) for n in names}


def _bin(tool: str) -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", tool)


def compile_sm90(fn, signature: dict, constexprs: dict, warps: int, stages: int, divisible: tuple[int, ...]) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src = ASTSource(fn, signature=signature, constexprs=constexprs,
                    attrs={(i,): [["tt.divisibility", 16]] for i in divisible})
    try:
        kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
    except Exception as exc:  # noqa: BLE001 - out of resources etc.: recorded
        return {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(kernel.asm["cubin"])
    try:
        usage = subprocess.run([_bin("cuobjdump"), "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
        sass = subprocess.run([_bin("cuobjdump"), "-sass", f.name], capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    grab = lambda key: int(m.group(1)) if (m := re.search(key + r":(\d+)", usage)) else None  # noqa: E731
    return {"registers": grab("REG"), "spill_bytes": grab("STACK"), "shared_bytes": kernel.metadata.shared,
            "mma": "wgmma" if "HGMMA" in sass else "mma.sync" if "HMMA" in sass else "none",
            "local_ld_st": len(re.findall(r"\bLDL\b", sass)) + len(re.findall(r"\bSTL\b", sass))}


def main(argv: list[str] | None = None) -> int:
    import triton

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output JSON (a new file, named by date and commit)")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    attn = lift(KB / "mingpt_attention_triton.py", ("linear_kernel", "attn_kernel"))
    gemm = lift(KB / "gemm_add_relu_triton.py", ("gemm_add_relu_kernel",))
    gemm_sig = dict(GEMM_SIG, GROUP_M="constexpr")
    rows = []
    for bm, bn, w, s in itertools.product((32, 64, 128), (32, 64), (4, 8), (1, 2)):
        cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_D": 128}
        rows.append({"kernel": "attn_kernel", "config": dict(cfg, num_warps=w, num_stages=s),
                     **compile_sm90(attn["attn_kernel"], ATTN_SIG, cfg, w, s, (0, 1, 2, 4, 5))})
        print(rows[-1], flush=True)
    for bm, bn, bk, w, s in itertools.product((64, 128), (64, 128, 256), (16, 32), (4, 8), (2, 3)):
        cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}
        rows.append({"kernel": "linear_kernel", "config": dict(cfg, num_warps=w, num_stages=s),
                     **compile_sm90(attn["linear_kernel"], GEMM_SIG, cfg, w, s, (0, 1, 2, 3, 4, 5, 6))})
        print(rows[-1], flush=True)
    for bm, bn, bk, s in ((128, 128, 32, 4), (128, 128, 32, 3), (128, 128, 32, 2), (128, 128, 16, 4), (64, 256, 32, 4),
                          (64, 128, 32, 4)):  # the six configs the H200 measured (guidance_6438ad0.json)
        cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}
        rows.append({"kernel": "gemm_add_relu_kernel", "config": dict(cfg, num_warps=8, num_stages=s),
                     **compile_sm90(gemm["gemm_add_relu_kernel"], gemm_sig, cfg, 8, s, (0, 1, 2, 3, 4, 5, 6))})
        print(rows[-1], flush=True)
    out = {"label": "compiled for sm_90 on a CPU (no GPU): the compiler's registers, spills and shared memory",
           "triton": triton.__version__, "wall_s": round(time.perf_counter() - t0, 1), "rows": rows}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
