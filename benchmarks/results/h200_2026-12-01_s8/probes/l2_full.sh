#!/usr/bin/env bash
# Which unit limits the L2 probe at ~51 % of lts__t_bytes' peak: the calibration's L2 probe launch profiled
# with ncu's full set (every section's metrics, raw page), then every metric with a pct_of_peak reading
# sorted high to low. Writes $OUT/l2_full.csv and $OUT/l2_full_top.txt. Run from the repo root.
set -u
NCU=$(python3 -c "from egg_mcp.profiling.runner import find_ncu; print(find_ncu() or '')")
$NCU --csv --page raw --print-units base --set full --clock-control none --profile-from-start off \
  --log-file $OUT/l2_full.csv python3 benchmarks/results/h200_2026-12-01_s7/probes/l2_target.py > $OUT/l2_full.out 2>&1
tail -3 $OUT/l2_full.out
python3 - <<'PY'
import csv, os
rows = list(csv.reader(open(os.environ["OUT"] + "/l2_full.csv")))
start = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
head, data = rows[start], rows[start + 2:]
r = data[-1]
vals = dict(zip(head, r))
pct = []
for h, v in vals.items():
    if "pct_of_peak" in h:
        try: pct.append((float(v.replace(",", "")), h))
        except ValueError: pass
pct.sort(reverse=True)
with open(os.environ["OUT"] + "/l2_full_top.txt", "w") as f:
    for p, h in pct:
        f.write(f"{p:8.2f}  {h}\n")
for p, h in pct[:45]:
    print(f"{p:8.2f}  {h}")
for h, v in vals.items():
    if any(k in h for k in ("xbar", "lts2", "ltcfabric", "gpu__time_duration", "cycles_elapsed.avg.per_second")) and "pct" not in h:
        print(f"{h:80s} {v}")
PY
