"""How Triton lays out the mma.sync attention tiles of KernelBench 43's candidate on sm_90: the warp layouts in the
TTGIR (warpsPerCTA) and the HMMA / HGMMA instructions per warp in the SASS, per (BLOCK_M, BLOCK_N, num_warps).
Compiled on the CPU (Triton ships ptxas and cuobjdump), no GPU:

    python benchmarks/tiling_attn_layouts.py --out OUT.json
    (recorded: benchmarks/results/archive/tiling/attn_layouts_sm90.json)

Run it under the Triton the H200 ran (3.6.0), e.g. from a venv with `pip install triton==3.6.0`. The tiling model's
mma.sync terms (tiling/attention.py: mma_sync_operand_regs, columns_redone) cite its output: HMMA x warps against
the HMMAs one program's key step needs says how much of S = Q K^T is computed more than once.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
from pathlib import Path

from tiling_compile_guidance import ATTN_SIG, KB, _bin, lift  # noqa: E402 - run from benchmarks/ or the repo root

CONFIGS = [(32, 32, 4), (32, 32, 8), (32, 64, 4), (32, 64, 8), (16, 32, 4), (64, 32, 4)]


def main() -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, help="output JSON (a new file, named by date and commit)")
    args = parser.parse_args()
    fns = lift(KB / "mingpt_attention_triton.py", ("attn_kernel",))
    rows = []
    for bm, bn, w in CONFIGS:
        src = ASTSource(fns["attn_kernel"], signature=ATTN_SIG, constexprs={"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_D": 128},
                        attrs={(i,): [["tt.divisibility", 16]] for i in range(2)})
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": w, "num_stages": 2})
        layouts = sorted(set(re.findall(r"warpsPerCTA = \[[0-9, ]+\]", k.asm["ttgir"])))
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(k.asm["cubin"])
            f.flush()
            sass = subprocess.run([_bin("cuobjdump"), "-sass", f.name], capture_output=True, text=True).stdout
        hmma, hgmma = len(re.findall(r"\bHMMA\.", sass)), len(re.findall(r"\bHGMMA\.", sass))
        rows.append({"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": 2, "layouts": layouts,
                     "hmma_per_warp": hmma, "hgmma_per_warp": hgmma, "hmma_x_warps": hmma * w})
        print(rows[-1])
    Path(args.out).write_text(json.dumps({"triton": triton.__version__, "target": "cuda sm_90", "precision": "tf32x3",
                                          "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
