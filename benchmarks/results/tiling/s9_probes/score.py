"""One table per model variant: rho on run A / run B replays (s7), on the full exhaustive space (s9 exhaustive for the
rowsums and layernorm_a, batch10 for biasgelu), and on the subset `run.py tiling_search` would pick (predict_live)."""
import json, sys
from pathlib import Path
sys.path.insert(0, '.'); sys.path.insert(0, 'benchmarks')
import tiling_rank_replay as rr
import tiling_search as ts
from egg_mcp.tiling.kernels import spearman
from egg_mcp.tiling.plan import config_key
RUNS = {'A': 'benchmarks/results/h200_2026-12-01_s7/tiling_search/tiling_search.json',
        'B': 'benchmarks/results/h200_2026-12-01_s7/tiling_search_42095a3/tiling_search.json'}
EXH = {'rowsum_a': 's9', 'rowsum_b': 's9', 'layernorm_a': 's9', 'biasgelu_a': 'b10', 'biasgelu_b': 'b10'}
FILES = {'s9': 'benchmarks/results/tiling/s9_probes/exhaustive/tiling_bench.json',
         'b10': 'benchmarks/results/tiling/batch10_tiling_bench.json'}
STREAM = ['softmax_a', 'softmax_b', 'layernorm_a', 'layernorm_b', 'rowsum_a', 'rowsum_b', 'biasgelu_a', 'biasgelu_b']
table = {c: {} for c in STREAM}
for name, p in RUNS.items():
    for c in rr.search_replay(Path(p), run_probe=lambda payload: None)['cases']:
        if c['case'] in table:
            table[c['case']][name] = c.get('rho')
for case, src in EXH.items():
    rec = next(c for c in json.loads(Path(FILES[src]).read_text())['cases'] if c['case'] == case)
    times = {config_key(r['config'].get('values', r['config'])): r['median_ms'] for r in rec['configs'] if r.get('median_ms')}
    est, space = rr._ranking(case, None)
    by = {config_key(e.config.values): e for e in est}
    full = [(e.predicted_ms, times[k]) for k, e in by.items() if e.feasible and k in times]
    table[case]['full'] = spearman(*map(list, zip(*full)))
    picked = ts.pick_configs(est, space, ts.TOP, ts.SAMPLE)
    sub = [(by[config_key(c)].predicted_ms, times[config_key(c)]) for c in picked if config_key(c) in times and by[config_key(c)].feasible]
    table[case]['live?'] = spearman(*map(list, zip(*sub)))
cols = ['A', 'B', 'full', 'live?']
print(f"{'case':12s} " + " ".join(f"{c:>6s}" for c in cols))
low = 0
for case, r in table.items():
    vals = [r.get(c) for c in cols]
    low += sum(v is not None and v < 0.7 for v in vals)
    print(f"{case:12s} " + " ".join('     —' if v is None else f"{v:6.3f}" for v in vals))
print('below 0.7:', low)
