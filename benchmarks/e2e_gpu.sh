#!/usr/bin/env bash
# End to end on the GPU (H200), ~3-4 minutes: the demo's stage table, then `egg-mcp bench` on the demo's
# shipped kernels (as KernelBench-format problems + solutions) and on the tiny bench fixtures.
#   bash benchmarks/e2e_gpu.sh OUT_DIR
# Writes: OUT/demo.json (stage table + final task_status), OUT/demo_table.md (printed table), OUT/demo.md
# (task report), OUT/demo_stages.png, OUT/demo.log; OUT/bench_demo/{summary.json,summary.md,speedups.png,
# results.jsonl}; OUT/bench_fixtures/...; OUT/env.txt.
set -u
out=${1:?usage: bash benchmarks/e2e_gpu.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
ws="$out/ws"

{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" 2>&1
  python3 -c "import matplotlib; print('matplotlib', matplotlib.__version__)" 2>&1 | tail -1; } > "$out/env.txt"
cat "$out/env.txt"

echo "== demo (softmax)"
t0=$(date +%s)
timeout -s INT 170 python3 -m egg_mcp demo --workspace "$ws" --json "$out/demo.json" \
    > "$out/demo_table.md" 2> "$out/demo.log"
echo "demo exit $? in $(( $(date +%s) - t0 ))s"
cat "$out/demo_table.md"; tail -5 "$out/demo.log"

echo "== bench: demo kernels as a bench set"
python3 benchmarks/e2e_demo_set.py "$out/demo_set" > /dev/null
t0=$(date +%s)
timeout -s INT 90 python3 -m egg_mcp bench "$out/demo_set/solutions" --problems "$out/demo_set/problems" \
    --out "$out/bench_demo" --workspace "$ws" > /dev/null 2> "$out/bench_demo.log"
echo "bench exit $? in $(( $(date +%s) - t0 ))s"
cat "$out/bench_demo/summary.md" 2>/dev/null | head -30

echo "== bench: fixtures (correct, wrong, broken)"
t0=$(date +%s)
timeout -s INT 60 python3 -m egg_mcp bench tests/fixtures/bench/solutions --problems tests/fixtures/bench/problems \
    --out "$out/bench_fixtures" --workspace "$ws" > /dev/null 2> "$out/bench_fixtures.log"
echo "bench exit $? in $(( $(date +%s) - t0 ))s"
head -12 "$out/bench_fixtures/summary.md" 2>/dev/null
rm -rf "$ws/scratch"
