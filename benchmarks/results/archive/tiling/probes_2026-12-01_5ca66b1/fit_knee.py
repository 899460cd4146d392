import sys, json, math, os
sys.path.insert(0,'.'); sys.path.insert(0,'benchmarks')
from egg_mcp.tiling.model import estimate_all
from egg_mcp.hardware import GPU_TABLE
from egg_mcp.tiling.kernels import spearman
import tiling_search as ts
from egg_mcp.tiling.dims import normalize_dims
from egg_mcp.tiling.space import extract_space
case, run = 'rowsum_a', 'tiling_bench_2026-11-30_layernorm_a_rowsum_a'
d=json.load(open(f'benchmarks/results/archive/tiling/{run}.json'))
rec=[c for c in d['cases'] if c['case']==case][0]
rows=[x for x in rec['configs'] if x.get('median_ms')]
inp=ts.case_inputs(case, False); dims=normalize_dims(inp['kind'], inp['dims'])
space=extract_space(inp['candidate'], kind=inp['kind'], dims=dims)
def score():
    es={json.dumps(e.config.values,sort_keys=True):e for e in estimate_all([r['config'] for r in rows], space, gpu=GPU_TABLE['H200'], dims=dims, kind=inp['kind'], dtype=inp['dtype'])}
    pr=[(es[json.dumps(r['config'],sort_keys=True)].predicted_ms, r['median_ms']) for r in rows if es[json.dumps(r['config'],sort_keys=True)].feasible and not r.get('spills')]
    lr=[math.log(p/m) for p,m in pr]; mu=sum(lr)/len(lr)
    return sum((x-mu)**2 for x in lr)/len(lr), spearman([p for p,_ in pr],[m for _,m in pr])
res=[]
for lp in [1.0, 1.5, 2.0, 3.0]:
    for wr in [2e9, 2.78e9, 4e9, 6e9, 8e9, 11e9, 15e9]:
        os.environ['LP']=str(lp); os.environ['WR0']=str(wr)
        e,rho=score(); res.append((round(e,5),lp,wr,round(rho,3)))
for r in sorted(res)[:10]: print(r)
print('by rho'); 
for r in sorted(res,key=lambda r:-r[3])[:6]: print(r)
