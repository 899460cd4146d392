#!/usr/bin/env bash
# GPU batch 5: verify vs KernelBench's protocol (same problem, candidate, run); 50 submissions at once.
set -u
out=$1; mkdir -p "$out"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 200 python3 benchmarks/bench_kernelbench_protocol.py "$out/kernelbench_protocol.json" 2>&1 | tail -40
echo "== kb protocol done at $(( $(date +%s) - t0 )) s"
timeout 100 python3 benchmarks/bench_load.py "$out/load_gpu.json" --n 50 2>&1 | tail -16
echo "== load done at $(( $(date +%s) - t0 )) s"
