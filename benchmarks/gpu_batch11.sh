#!/usr/bin/env bash
# GPU batch 11 (session 3): the timing change on the H200 — the L2 flush now reads instead of zeroing,
# and verify can add an isolated, ncu-comparable reading (EvalOptions.isolated_timing). Re-runs the
# engine GPU suite (A/A, CV, faults, adversarial, the isolated reading), bench_verify (warm p50) and
# bench_ncu_agreement (steady-state and isolated ratios). Output in $1. About 7.5 minutes.
set -u
out=$1; mkdir -p "$out"
export PYTHONUNBUFFERED=1
t0=$(date +%s)
timeout 170 python3 -m pytest tests/gpu/test_engine_gpu.py -m gpu -q -p no:cacheprovider -rA 2>&1 | tee "$out/engine_gpu.log" | grep -v "^USDT" | tail -14
echo "== engine gpu tests done at $(( $(date +%s) - t0 )) s"
timeout 150 python3 benchmarks/bench_verify.py "$out/bench_verify.json" > "$out/bench_verify.log" 2>&1
python3 - "$out/bench_verify.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
w = d.get("warm", {})
print("errors", d.get("errors"), "warm p50", w.get("warm_verify_p50_s"), "cold", d.get("cold", {}).get("cold_verify_s"))
for r in d.get("cv", {}).get("cv_by_kernel_length", []):
    print(f"{r['median_ms']*1e3:9.1f} us  cv {r['cv']*100:.2f}%  {r['method']:<11} aa {r['aa_ratio']:.4f}")
PY
echo "== bench_verify done at $(( $(date +%s) - t0 )) s"
timeout 200 python3 benchmarks/bench_ncu_agreement.py "$out/ncu_agreement.json" 2>&1 | grep -v "^USDT\|profiler_st\|UserWarning\|_warn_once" | tail -14
echo "== ncu agreement done at $(( $(date +%s) - t0 )) s"
