#!/usr/bin/env bash
# GPU batch 9 (session 2): the last tiling cases, rowsum_a and biasgelu_b. Output in $1.
set -u
out=$1; mkdir -p "$out"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 250 python3 benchmarks/tiling_bench.py "$out/tiling" --cases biasgelu_b,rowsum_a --autotune "" --max-wall-s 240 2>&1 | tail -10
echo "== tiling done at $(( $(date +%s) - t0 )) s"
