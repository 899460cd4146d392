"""Per config of one case in one recorded run: measured vs the current model's prediction (and its notes)."""
import json, sys
from pathlib import Path
sys.path.insert(0, '.'); sys.path.insert(0, 'benchmarks')
import tiling_rank_replay as rr
from egg_mcp.hardware import GPU_TABLE
from egg_mcp.tiling.kernels import spearman
from egg_mcp.tiling.model import estimate_all
from egg_mcp.tiling.plan import config_key
RUNS = {'A': 'benchmarks/results/h200_2026-12-01_s7/tiling_search/tiling_search.json',
        'B': 'benchmarks/results/h200_2026-12-01_s7/tiling_search_42095a3/tiling_search.json'}
case, run = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else 'A')
path = RUNS.get(run, run)
rec = next(c for c in json.loads(Path(path).read_text())['cases'] if c['case'] == case)
rows = [r for r in rec['configs'] if r.get('measured_ms')]
space, canonical, inp = rr._search_space(rec, lambda p: None)
est = {config_key(e.config.values): e for e in estimate_all([r['config'] for r in rows], space, gpu=GPU_TABLE['H200'],
                                                             dims=canonical, kind=inp['kind'], dtype=inp['dtype'])}
pairs = []
for r in sorted(rows, key=lambda r: r['measured_ms']):
    e = est[config_key(r['config'])]
    pairs.append((e.predicted_ms, r['measured_ms']))
    print(f"{str(list(r['config'].values())):18s} meas {r['measured_ms']*1e3:7.1f} pred {e.predicted_ms*1e3 if e.predicted_ms else float('nan'):7.1f} "
          f"c={e.ctas_per_sm} regs={e.regs_per_thread} {'; '.join(n[:70] for n in e.notes)[:140]}")
print('rho', spearman([p for p, _ in pairs if p], [m for p, m in pairs if p]))
