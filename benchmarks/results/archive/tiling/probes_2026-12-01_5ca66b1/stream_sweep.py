"""DRAM streaming rate of a looping row reduction on the H200, swept over what the tiling model's loop term needs:
resident warps per SM, bytes a warp has in flight per trip, and how many SMs are busy (programs vs 132 SMs).
The session-8 replays could not separate these from the tuning spaces (rowsum_b's 64-program configs stream 6 GB/s
per warp at 8 warps per SM, rowsum_a's 132-SM ones 3.3 at the same warps and bytes). Not yet run.

    OUT=DIR python3 benchmarks/results/archive/tiling/probes_2026-12-01_5ca66b1/stream_sweep.py      # on the GPU machine, ~2-3 min
    SMOKE=1 TRITON_INTERPRET=1 python3 benchmarks/results/archive/tiling/probes_2026-12-01_5ca66b1/stream_sweep.py   # CPU syntax check

The kernel is benchmarks/tiling_kernels/row_sum.py's (BLOCK_M rows per program, BLOCK_N-column trips); the grid
is `programs` and the row length is chosen so every config streams the same ~256 MB from DRAM (> L2). Each config
is timed best of 10 CUDA-event runs after 3 warm-ups; its compiled registers and spills come from Triton. Prints
one RESULT json line; writes $OUT/stream_sweep.json."""
import json
import os
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "benchmarks" / "tiling_kernels"))
from row_sum import row_sum_kernel  # noqa: E402

SMOKE = bool(os.environ.get("SMOKE"))
device = "cpu" if SMOKE else "cuda"
sms = 132 if SMOKE else torch.cuda.get_device_properties(0).multi_processor_count
TOTAL = (1 << 14) if SMOKE else (1 << 26)  # fp32 elements: 256 MB on the GPU
rows_out = []
for programs in ((2, 4) if SMOKE else (64, sms, 2 * sms, 3 * sms, 4 * sms, 8 * sms, 16 * sms, 32 * sms)):
    for bm in ((1, 4) if SMOKE else (1, 2, 4, 8, 16)):
        for bn in ((128,) if SMOKE else (256, 512, 1024, 2048)):
            n_rows = programs * bm
            n_cols = max(bn, TOTAL // n_rows // bn * bn)
            x = torch.ones(n_rows, n_cols, device=device)
            y = torch.empty(n_rows, device=device)
            for warps in ((1,) if SMOKE else (1, 2, 4, 8)):
                if bm * bn // (32 * warps) > 256:
                    continue  # >= 1 KB of fp32 per thread: spills whatever else; nothing to learn
                row = {"programs": programs, "BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "n_rows": n_rows,
                       "n_cols": n_cols, "bytes": 4 * n_rows * n_cols}
                try:
                    launch = lambda: row_sum_kernel[(programs,)](x, y, n_rows, n_cols, x.stride(0),  # noqa: E731
                                                                 BLOCK_M=bm, BLOCK_N=bn, num_warps=warps)
                    kernel = launch()
                    if SMOKE:
                        assert torch.allclose(y, x.sum(dim=1))
                        rows_out.append(row)
                        continue
                    for _ in range(3):
                        launch()
                    torch.cuda.synchronize()
                    times = []
                    for _ in range(10):
                        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        a.record(); launch(); b.record(); b.synchronize()
                        times.append(a.elapsed_time(b))
                    ms = min(times)
                    row.update(ms=round(ms, 5), tb_s=round(row["bytes"] / (ms * 1e-3) / 1e12, 3),
                               registers=getattr(kernel, "n_regs", None), spills=getattr(kernel, "n_spills", None))
                except Exception as exc:  # a config that does not compile or launch is a row, not a stop
                    row["error"] = repr(exc)[:200]
                rows_out.append(row)
print("RESULT " + json.dumps({"configs": len(rows_out), "errors": sum("error" in r for r in rows_out),
                              "best_tb_s": max((r.get("tb_s", 0) for r in rows_out), default=None)}))
Path(os.environ.get("OUT", "."), "stream_sweep.json").write_text(json.dumps(rows_out, indent=1) + "\n")
