#!/usr/bin/env bash
# GPU batch 9 (prepared in session 2, run in session 3): what issues 3 and 5 still need on the H200.
#  1. 50 verify submissions at once after the single-flight baseline fix and burst spares;
#  2. the tiling case rowsum_a (not measured yet) and layernorm_a again, whose best
#     config the register model used to prune (the file now stores every config for offline replay).
# Output in $1. About 9.5 minutes. The bias_gelu cases are gpu_batch10.sh (their exhaustive
# compile alone outgrew the shared budget in batch 8).
set -u
out=$1; mkdir -p "$out"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 200 python3 benchmarks/bench_load.py "$out/load_gpu.json" --n 50 --sizes batch_size=1024,dim=2048 --max-wall-s 180 2>&1 | grep -v " correct " | tail -22
echo "== load done at $(( $(date +%s) - t0 )) s"
timeout 380 python3 benchmarks/tiling_bench.py "$out/tiling" --cases layernorm_a,rowsum_a --autotune "" --max-wall-s 370 2>&1 | tail -10
echo "== tiling done at $(( $(date +%s) - t0 )) s"
