#!/usr/bin/env bash
# GPU batch 1: ncu fixtures, profiler wall-time bench, profiler + analysis GPU tests. Output in $1.
set -u
out=$1; mkdir -p "$out"
export PYTHONUNBUFFERED=1
python3 benchmarks/profiling_capture_fixtures.py tests/data/ncu 2>&1 | tail -15
cp -r tests/data/ncu "$out/ncu" 2>/dev/null; (cd tests/data && tar czf "$out/ncu_fixtures.tgz" ncu)
python3 benchmarks/profiling_bench.py "$out/profiling_bench.json" 2>&1 | tail -8
python3 -m pytest tests/gpu/test_profiling_gpu.py tests/test_analysis_gpu.py -m gpu -q -s -p no:cacheprovider 2>&1 | tail -30
python3 -m pytest tests/test_profiling_fixtures.py -q -p no:cacheprovider 2>&1 | tail -5
