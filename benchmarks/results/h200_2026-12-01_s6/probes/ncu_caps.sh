#!/bin/bash
# does dropping capabilities break ncu's counters? (run from repo root, OUT set)
grep -i "profil" /proc/driver/nvidia/params
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for m in none drop keep; do
  echo "=== mode $m"
  timeout 90 $NCU --clock-control none --metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed --csv python3 .gpu_probe/bad2.py $m good 2>&1 | grep -v "^==PROF==" | tail -6
done
