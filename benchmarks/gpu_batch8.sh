#!/usr/bin/env bash
# GPU batch 8 (session 2): 50 verify submissions at once through MCP (burst spares); tiling cases
# rowsum_b (with triton.autotune over the full space for the wall-time ratio), layernorm_b (tests the
# recalibrated norm register model out of sample), biasgelu_a. Output in $1.
set -u
out=$1; mkdir -p "$out"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 150 python3 benchmarks/bench_load.py "$out/load_gpu.json" --n 50 --sizes batch_size=1024,dim=2048 2>&1 | tail -20
echo "== load done at $(( $(date +%s) - t0 )) s"
timeout 390 python3 benchmarks/tiling_bench.py "$out/tiling" --cases rowsum_b,layernorm_b,biasgelu_a --autotune rowsum_b --max-wall-s 380 2>&1 | tail -12
echo "== tiling done at $(( $(date +%s) - t0 )) s"
