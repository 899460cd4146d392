#!/usr/bin/env bash
# GPU batch 9 (prepared in session 2, NOT yet run): what issues 3 and 5 still need on the H200.
#  1. 50 verify submissions at once after the single-flight baseline fix and burst spares;
#  2. the tiling cases not measured yet (biasgelu_a/b, rowsum_a) and layernorm_a again, whose best
#     config the register model used to prune (the file now stores every config for offline replay).
# Output in $1. Expect ~9 minutes; split it if the device budget is short.
set -u
out=$1; mkdir -p "$out"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 200 python3 benchmarks/bench_load.py "$out/load_gpu.json" --n 50 --sizes batch_size=1024,dim=2048 --max-wall-s 180 2>&1 | grep -v " correct " | tail -22
echo "== load done at $(( $(date +%s) - t0 )) s"
timeout 360 python3 benchmarks/tiling_bench.py "$out/tiling" --cases layernorm_a,biasgelu_b,rowsum_a,biasgelu_a --autotune "" --max-wall-s 350 2>&1 | tail -10
echo "== tiling done at $(( $(date +%s) - t0 )) s"
