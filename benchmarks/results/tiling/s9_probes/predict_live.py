"""What `run.py tiling_search` should read with the current model, before it runs (CPU): per case, the configs it
will pick (tiling_search.pick_configs: the model's top 6, a seeded sample of 10 more, the source's own) looked up in
recorded H200 times of the same configs, and the rho over those found. Sources, first hit wins per config: the s9
exhaustive run and session 7's runs B and A (all GpuTimer); biasgelu has only batch 10 (an older timer, every time
4-16 % higher), used alone. A live run re-times the configs: expect the repeatability of the order (0.98-1.0
between runs A and B), not these numbers exactly.

    python3 benchmarks/results/tiling/s9_probes/predict_live.py [--json OUT]"""
import json
import sys
from pathlib import Path

sys.path.insert(0, '.'); sys.path.insert(0, 'benchmarks')
import tiling_rank_replay as rr  # noqa: E402
import tiling_search as ts  # noqa: E402
from egg_mcp.hardware import GPU_TABLE  # noqa: E402
from egg_mcp.tiling.kernels import spearman  # noqa: E402
from egg_mcp.tiling.model import estimate_all  # noqa: E402
from egg_mcp.tiling.plan import config_key  # noqa: E402
from egg_mcp.tiling.space import enumerate_configs  # noqa: E402

S7 = 'benchmarks/results/h200_2026-12-01_s7/'
GPU_TIMER = [('s9 exhaustive', 'benchmarks/results/tiling/s9_probes/exhaustive/tiling_bench.json', 'median_ms'),
             ('s7 run B', S7 + 'tiling_search_42095a3/tiling_search.json', 'measured_ms'),
             ('s7 run A', S7 + 'tiling_search/tiling_search.json', 'measured_ms')]
OLD_TIMER = [('batch 10', 'benchmarks/results/tiling/batch10_tiling_bench.json', 'median_ms')]


def times_for(case: str, sources) -> dict:
    out = {}
    for label, path, field in sources:
        for rec in json.loads(Path(path).read_text())['cases']:
            if rec['case'] != case:
                continue
            for r in rec.get('configs') or []:
                key = config_key(r['config'].get('values', r['config']) if 'values' in r['config'] else r['config'])
                if r.get(field) and key not in out:
                    out[key] = (r[field], label)
    return out


def predict(case: str) -> dict:
    space, canonical, inp = rr._search_space({'case': case, 'kernels': [0, 1]}, rr._engine_probe)
    configs, _, _ = enumerate_configs(space)
    est = estimate_all(configs, space, gpu=GPU_TABLE['H200'], dims=canonical, kind=inp['kind'], dtype=inp['dtype'])
    by = {config_key(e.config.values): e for e in est}
    picked = ts.pick_configs(est, space, ts.TOP, ts.SAMPLE)
    times = times_for(case, GPU_TIMER) or times_for(case, OLD_TIMER)
    pairs = [(by[config_key(c)].predicted_ms, *times[config_key(c)]) for c in picked
             if config_key(c) in times and by[config_key(c)].feasible]
    rho = spearman([p for p, _, _ in pairs], [m for _, m, _ in pairs]) if len(pairs) >= 3 else None
    return {'case': case, 'picked': len(picked), 'found': len(pairs), 'rho': rho,
            'sources': sorted({s for _, _, s in pairs})}


if __name__ == '__main__':
    rows = [predict(c) for c in (*ts.TILING_CASES, *ts.MULTI_CASES)]
    for r in rows:
        rho = "—" if r["rho"] is None else f"{r['rho']:.3f}"
        print(f"{r['case']:22s} picked {r['picked']:2d} found {r['found']:2d} rho {rho}  ({', '.join(r['sources'])})")
    if '--json' in sys.argv:
        Path(sys.argv[sys.argv.index('--json') + 1]).write_text(json.dumps(rows, indent=1) + '\n')
