#!/usr/bin/env bash
# GPU batch 2: engine GPU tests, verify benchmark, tiling + workflow GPU tests. Output in $1.
set -u
out=$1; mkdir -p "$out"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 200 python3 -m pytest tests/gpu/test_engine_gpu.py -m gpu -q -p no:cacheprovider -rA 2>&1 | tee "$out/engine_gpu.log" | tail -25
echo "== engine gpu tests done at $(( $(date +%s) - t0 )) s"
timeout 150 python3 benchmarks/bench_verify.py "$out/bench_verify.json" 2>&1 | tail -25
echo "== bench_verify done at $(( $(date +%s) - t0 )) s"
timeout 150 python3 -m pytest tests/gpu/test_tiling_gpu.py tests/gpu/test_workflow_gpu.py -m gpu -q -s -p no:cacheprovider 2>&1 | tee "$out/workflow_gpu.log" | tail -25
echo "== workflow/tiling gpu tests done at $(( $(date +%s) - t0 )) s"
