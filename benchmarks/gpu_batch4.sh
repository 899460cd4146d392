#!/usr/bin/env bash
# GPU batch 4: end-to-end demo + bench, and the memory-bound tiling cases. Output in $1 (tarred).
set -u
out=$1; mkdir -p "$out/e2e"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 330 bash benchmarks/e2e_gpu.sh "$out/e2e" 2>&1 | tail -45
echo "== e2e done at $(( $(date +%s) - t0 )) s"
rm -rf "$out/e2e/ws"
timeout 150 python3 benchmarks/tiling_bench.py "$out/tiling" --cases softmax_a,layernorm_a,rowsum_a,biasgelu_a --autotune '' --max-wall-s 120 2>&1 | tail -12
echo "== tiling done at $(( $(date +%s) - t0 )) s"
(cd "$out" && tar czf results.tgz e2e tiling && rm -rf e2e tiling)
