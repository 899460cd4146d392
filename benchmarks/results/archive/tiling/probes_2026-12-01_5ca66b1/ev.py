import sys, json
sys.path.insert(0, '.'); sys.path.insert(0, 'benchmarks')
from pathlib import Path
import tiling_rank_replay as rr
RUNS = {'A_b4a4599': 'benchmarks/results/archive/h200_2026-12-01_b4a4599-ae198ae/tiling_search/tiling_search.json',
        'B_42095a3': 'benchmarks/results/archive/h200_2026-12-01_b4a4599-ae198ae/tiling_search_42095a3/tiling_search.json'}
STREAM = ['softmax_a','softmax_b','layernorm_a','layernorm_b','rowsum_a','rowsum_b','biasgelu_a','biasgelu_b']
def main(all_cases=False):
    table = {}
    for name, p in RUNS.items():
        res = rr.search_replay(Path(p), run_probe=(rr._engine_probe if all_cases else (lambda payload: None)))
        for c in res['cases']:
            table.setdefault(c['case'], {})[name] = c.get('rho')
    ex = rr.run(rr.stored_files())
    for c in ex['cases']:
        if c.get('rho') is not None:
            table.setdefault(c['case'], {})['exh_' + Path(c['file']).name.split('_')[0]] = c['rho']
            table[c['case']]['s8/16'] = (c['search8_ratio'], c['search16_ratio'])
    cols = ['A_b4a4599', 'B_42095a3', 'exh_batch9', 'exh_batch10']
    bad = 0
    for case, r in table.items():
        if not all_cases and case not in STREAM: continue
        vals = [r.get(k) for k in cols]
        bad += sum(1 for v in vals if v is not None and v < 0.7)
        print(f"{case:22s} " + " ".join('   —  ' if v is None else f"{v:6.3f}" for v in vals), r.get('s8/16', ''))
    print('below 0.7:', bad)
    return table
if __name__ == '__main__':
    main('--all' in sys.argv)
