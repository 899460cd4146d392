#!/usr/bin/env bash
# GPU batch 10 (session 3): the elementwise tiling cases, alone so that their exhaustive measurement
# has the whole call (biasgelu_a ran out of an 86 s budget in batch 8). biasgelu_a goes first; the
# second case finds most kernels in the shared Triton cache (same constexpr specialisations).
# Output in $1. At most ~7 minutes.
set -u
out=$1; mkdir -p "$out"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 430 python3 benchmarks/tiling_bench.py "$out/tiling" --cases biasgelu_a,biasgelu_b --autotune "" --max-wall-s 420 2>&1 | tail -12
echo "== tiling done at $(( $(date +%s) - t0 )) s"
