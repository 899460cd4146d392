#!/usr/bin/env bash
# GPU batch 3: tiling benchmark (vs exhaustive), tiling GPU tests, engine timing re-check, verify bench.
set -u
out=$1; mkdir -p "$out"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 270 python3 benchmarks/tiling_bench.py "$out/tiling" --max-wall-s 230 2>&1 | tail -22
echo "== tiling bench done at $(( $(date +%s) - t0 )) s"
timeout 100 python3 -m pytest tests/gpu/test_tiling_gpu.py -m gpu -q -p no:cacheprovider 2>&1 | tail -4
echo "== tiling gpu tests done at $(( $(date +%s) - t0 )) s"
timeout 150 python3 benchmarks/bench_verify.py "$out/bench_verify.json" > "$out/bench_verify.log" 2>&1
python3 - "$out/bench_verify.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("errors", d.get("errors"), "warm p50", d.get("warm", {}).get("warm_verify_p50_s"), "cold", d.get("cold", {}).get("cold_verify_s"))
for r in d.get("cv", {}).get("cv_by_kernel_length", []):
    print(f"{r['median_ms']*1e3:9.1f} us  cv {r['cv']*100:.2f}%  {r['method']:<11} aa {r['aa_ratio']:.4f}")
PY
echo "== bench_verify done at $(( $(date +%s) - t0 )) s"
