"""How much of a row a program reads twice still comes from L2 on the second read, against the working set the
resident programs hold (the tiling model's two-pass softmax / norm pricing). H200, ~30 s.

    OUT=DIR python3 benchmarks/results/tiling/s9_probes/l2_reuse.py           # GPU
    SMOKE=1 TRITON_INTERPRET=1 python3 benchmarks/results/tiling/s9_probes/l2_reuse.py   # CPU plumbing check

Each program sums its row of R bytes once (PASSES=1) or twice (PASSES=2); the grid covers 512 MB of rows whatever
R, 4 warps, 512-column fp32 blocks. Working set = resident programs (SMs x CTAs per SM from the compiled
registers) x R. Both passes are DRAM-bound when they miss, so the second pass's share of a first pass,
t2 / t1 - 1 = miss + (1 - miss) * c_hit, gives the miss fraction once c_hit (a hit's cost relative to a DRAM
read) is read off the smallest working sets. Prints one RESULT json line; writes $OUT/l2_reuse.json."""
import json
import os
from pathlib import Path

import torch
import triton
import triton.language as tl

SMOKE = bool(os.environ.get("SMOKE"))


@triton.jit
def row_twice(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr, PASSES: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for _ in tl.static_range(PASSES):
        for start in range(0, n_cols, BLOCK):
            c = start + offs
            acc += tl.load(x_ptr + row * stride + c, mask=c < n_cols, other=0.0)
    tl.store(y_ptr + row, tl.sum(acc, axis=0))


device = "cpu" if SMOKE else "cuda"
sms = 132 if SMOKE else torch.cuda.get_device_properties(0).multi_processor_count
l2 = 0 if SMOKE else torch.cuda.get_device_properties(0).L2_cache_size
total = (1 << 16) if SMOKE else (1 << 27)  # fp32 elements: 512 MB
rows = []
for row_kb in ((1, 2) if SMOKE else (2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512)):
    n_cols = row_kb * 256
    n_rows = max(1, total // n_cols)
    x = torch.ones(n_rows, n_cols, device=device)
    y = torch.empty(n_rows, device=device)
    rec = {"row_kb": row_kb, "n_rows": n_rows, "bytes": 4 * n_rows * n_cols}
    for passes in (1, 2):
        launch = lambda: row_twice[(n_rows,)](x, y, n_cols, x.stride(0), BLOCK=512, PASSES=passes,  # noqa: E731
                                              num_warps=4)
        kernel = launch()
        if SMOKE:
            assert torch.allclose(y, passes * x.sum(dim=1))
            continue
        ms = triton.testing.do_bench(launch, warmup=25, rep=200)
        regs = kernel.n_regs
        ctas = min(32, 2048 // 128, 65536 // (-(-regs // 8) * 8 * 128))
        rec[f"ms_{passes}"] = round(ms, 5)
        rec[f"regs_{passes}"] = regs
        rec[f"ctas_{passes}"] = ctas
    if not SMOKE:
        rec["working_set_mb"] = round(min(n_rows, sms * rec["ctas_2"]) * row_kb / 1024, 2)
        rec["second_over_first"] = round(rec["ms_2"] / rec["ms_1"] - 1, 4)
        rec["tb_s_1"] = round(rec["bytes"] / (rec["ms_1"] * 1e-3) / 1e12, 3)
    rows.append(rec)
print("RESULT " + json.dumps({"l2_bytes": l2, "rows": [(r["row_kb"], r.get("working_set_mb"), r.get("second_over_first"))
                                                    for r in rows]}))
Path(os.environ.get("OUT", "."), "l2_reuse.json").write_text(json.dumps({"l2_bytes": l2, "sms": sms, "rows": rows},
                                                                       indent=1) + "\n")
