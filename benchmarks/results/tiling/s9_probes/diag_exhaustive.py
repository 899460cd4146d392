"""Per config of one case of an exhaustive tiling_bench.json: measured vs the current model, with the compiled
registers / spills and the model's occupancy; sorted by measured time."""
import json, sys
from pathlib import Path
sys.path.insert(0, '.'); sys.path.insert(0, 'benchmarks')
import tiling_rank_replay as rr
from egg_mcp.tiling.kernels import spearman
from egg_mcp.tiling.plan import config_key
case = sys.argv[1]
path = Path(sys.argv[2] if len(sys.argv) > 2 else 'benchmarks/results/tiling/s9_probes/exhaustive/tiling_bench.json')
rec = next(c for c in json.loads(path.read_text())['cases'] if c['case'] == case)
est, _ = rr._ranking(case, None)
by = {config_key(e.config.values): e for e in est}
rows = []
for r in rec['configs']:
    v = r['config'].get('values', r['config'])
    e = by[config_key(v)]
    if r.get('median_ms') and e.feasible:
        rows.append((r['median_ms'], e.predicted_ms, list(v.values()), r.get('registers'), r.get('spills'), e.ctas_per_sm, e.notes))
rows.sort()
for m, p, v, reg, sp, c, notes in rows:
    print(f"{str(v):16s} meas {m*1e3:7.1f} pred {p*1e3:7.1f} regs {reg} sp {sp} c={c} {'; '.join(n[:60] for n in notes)[:100]}")
print('rho', spearman([r[1] for r in rows], [r[0] for r in rows]), len(rows))
