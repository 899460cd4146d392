#!/usr/bin/env bash
# Why the L2 probe reads only ~55 % of ncu's lts__t_bytes peak: which L2 metrics this ncu has (partition
# fabric, per source unit), then the probe's launch profiled with the ones that exist. Writes $OUT/l2_*.
set -u
NCU=$(python3 -c "from egg_mcp.profiling.runner import find_ncu; print(find_ncu() or '')")
$NCU --query-metrics --chip gh100 > $OUT/l2_query_all.txt 2>&1
grep -iE "^(lts__t_(bytes|sectors|requests)|lts__ltcfabric|ltcfabric|lts__d|lts__xbar|lts__t_sectors_srcunit)" $OUT/l2_query_all.txt > $OUT/l2_query.txt
cut -d' ' -f1 $OUT/l2_query.txt | head -60
want=""
for base in lts__t_bytes lts__t_sectors lts__t_sectors_srcunit_tex lts__t_sectors_srcunit_ltcfabric lts__t_requests_srcunit_ltcfabric lts__t_sectors_srcunit_tex_lookup_hit lts__t_sectors_srcunit_ltcfabric_lookup_hit lts__d_sectors lts__t_sectors_srcunit_tex_op_read; do
  if grep -q "^$base " $OUT/l2_query_all.txt; then want="$want,$base.sum,$base.sum.per_second,$base.sum.pct_of_peak_sustained_elapsed"; fi
done
for m in $(grep -oiE "^(lts__ltcfabric[a-z0-9_]*|ltcfabric[a-z0-9_]*|lts__xbar[a-z0-9_]*)" $OUT/l2_query_all.txt | sort -u | head -8); do
  want="$want,$m.sum,$m.sum.pct_of_peak_sustained_elapsed"
done
want="${want#,},gpu__time_duration.sum,lts__cycles_elapsed.avg.per_second,sm__cycles_elapsed.avg.per_second"
echo "metrics: $want"
$NCU --csv --page raw --print-units base --metrics "$want" --clock-control none --profile-from-start off \
  --log-file $OUT/l2_fabric.csv python3 benchmarks/results/h200_2026-12-01_s7/probes/l2_target.py > $OUT/l2_fabric.out 2>&1
tail -5 $OUT/l2_fabric.out
python3 - <<'PY'
import csv, os
rows = list(csv.reader(open(os.environ["OUT"] + "/l2_fabric.csv")))
start = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
head, data = rows[start], rows[start + 2:]
for r in data:
    for h, v in zip(head, r):
        if h.startswith(("lts", "ltc", "gpu__", "sm__")):
            print(f"{h:80s} {v}")
PY
