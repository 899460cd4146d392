"""What `run.py tiling_search` will read, before it runs: the configs it picks (the model's top 6 + a seeded sample
of 10 + the source's, tiling_search.pick_configs) looked up in an exhaustive H200 run of the same case, and the
rho over them. The live run re-times them, so expect the repeatability of the order (~0.98), not exactness."""
import json, sys
from pathlib import Path
sys.path.insert(0, '.'); sys.path.insert(0, 'benchmarks')
import tiling_rank_replay as rr
import tiling_search as ts
from egg_mcp.tiling.kernels import spearman
from egg_mcp.tiling.plan import config_key
from egg_mcp.tiling.space import current_config
FILES = {'rowsum_a': 'benchmarks/results/tiling/s9_probes/exhaustive/tiling_bench.json',
         'rowsum_b': 'benchmarks/results/tiling/s9_probes/exhaustive/tiling_bench.json',
         'layernorm_a': 'benchmarks/results/tiling/s9_probes/exhaustive/tiling_bench.json',
         'biasgelu_a': 'benchmarks/results/tiling/batch10_tiling_bench.json',
         'biasgelu_b': 'benchmarks/results/tiling/batch10_tiling_bench.json'}
for case, f in FILES.items():
    rec = next(c for c in json.loads(Path(f).read_text())['cases'] if c['case'] == case)
    times = {config_key(r['config'].get('values', r['config'])): r['median_ms'] for r in rec['configs'] if r.get('median_ms')}
    est, space = rr._ranking(case, None)
    picked = ts.pick_configs(est, space, ts.TOP, ts.SAMPLE)
    by = {config_key(e.config.values): e for e in est}
    pairs = [(by[config_key(c)].predicted_ms, times[config_key(c)]) for c in picked
             if config_key(c) in times and by[config_key(c)].feasible]
    print(f"{case:12s} n={len(pairs):2d} rho={spearman(*map(list, zip(*pairs))):.3f}")
