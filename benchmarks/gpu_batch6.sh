#!/usr/bin/env bash
# GPU batch 6 (session 2): engine GPU tests after the graph-replay change, verify bench (with the
# per-phase breakdown), verify vs ncu gpu__time_duration agreement. Output in $1.
set -u
out=$1; mkdir -p "$out"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 170 python3 -m pytest tests/gpu/test_engine_gpu.py -m gpu -q -p no:cacheprovider -rA 2>&1 | tee "$out/engine_gpu.log" | tail -14
echo "== engine gpu tests done at $(( $(date +%s) - t0 )) s"
timeout 150 python3 benchmarks/bench_verify.py "$out/bench_verify.json" > "$out/bench_verify.log" 2>&1
python3 - "$out/bench_verify.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
w = d.get("warm", {})
print("errors", d.get("errors"), "warm p50", w.get("warm_verify_p50_s"), "cold", d.get("cold", {}).get("cold_verify_s"))
for r in w.get("results", [])[:2]:
    print("phases", r.get("phase_s"), "wall", r.get("wall_s"))
for r in d.get("cv", {}).get("cv_by_kernel_length", []):
    print(f"{r['median_ms']*1e3:9.1f} us  cv {r['cv']*100:.2f}%  {r['method']:<11} aa {r['aa_ratio']:.4f}")
PY
echo "== bench_verify done at $(( $(date +%s) - t0 )) s"
timeout 200 python3 benchmarks/bench_ncu_agreement.py "$out/ncu_agreement.json" 2>&1 | tail -14
echo "== ncu agreement done at $(( $(date +%s) - t0 )) s"
