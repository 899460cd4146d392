#!/usr/bin/env bash
# GPU batch 7 (session 2): 50 verify submissions at once through MCP; tiling cases gemm_b,
# softmax_b, layernorm_a against exhaustive measurement. Output in $1.
set -u
out=$1; mkdir -p "$out"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 60 python3 benchmarks/bench_ncu_agreement.py "$out/ncu_agreement_bf16.json" layernorm,bias_gelu 2>&1 | tail -4
echo "== ncu agreement (bf16 cases) done at $(( $(date +%s) - t0 )) s"
timeout 150 python3 benchmarks/bench_load.py "$out/load_gpu.json" --n 50 --sizes batch_size=1024,dim=2048 2>&1 | tail -20
echo "== load done at $(( $(date +%s) - t0 )) s"
timeout 340 python3 benchmarks/tiling_bench.py "$out/tiling" --cases gemm_b,softmax_b,layernorm_a --autotune "" --max-wall-s 330 2>&1 | tail -12
echo "== tiling done at $(( $(date +%s) - t0 )) s"
