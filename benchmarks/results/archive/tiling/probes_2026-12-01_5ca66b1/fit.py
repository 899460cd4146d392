# fit WL/WR on batch9 rowsum_a by log-time error of the model itself
import sys, json, math, os, subprocess, itertools
sys.path.insert(0,'.'); sys.path.insert(0,'benchmarks')
import importlib
import egg_mcp.tiling.stream as st
from egg_mcp.tiling.model import estimate_all
from egg_mcp.hardware import GPU_TABLE
from egg_mcp.tiling.kernels import spearman
import tiling_search as ts
from egg_mcp.tiling.dims import normalize_dims
from egg_mcp.tiling.space import extract_space
case=sys.argv[1]; run=sys.argv[2]
d=json.load(open(f'benchmarks/results/archive/tiling/{run}.json'))
rec=[c for c in d['cases'] if c['case']==case][0]
rows=[x for x in rec['configs'] if x.get('median_ms') and not x.get('spills')]
inp=ts.case_inputs(case, False); dims=normalize_dims(inp['kind'], inp['dims'])
space=extract_space(inp['candidate'], kind=inp['kind'], dims=dims)
def score():
    es={json.dumps(e.config.values,sort_keys=True):e for e in estimate_all([r['config'] for r in rows], space, gpu=GPU_TABLE['H200'], dims=dims, kind=inp['kind'], dtype=inp['dtype'])}
    pr=[(es[json.dumps(r['config'],sort_keys=True)].predicted_ms, r['median_ms']) for r in rows if es[json.dumps(r['config'],sort_keys=True)].feasible]
    # scale-free log error: subtract mean log ratio
    lr=[math.log(p/m) for p,m in pr]; mu=sum(lr)/len(lr)
    return sum((x-mu)**2 for x in lr)/len(lr), spearman([p for p,_ in pr],[m for _,m in pr]), len(pr)
mode=sys.argv[3]
os.environ['WMODE']=mode
res=[]
for L in [0.6e-6,0.8e-6,1.0e-6,1.2e-6,1.4e-6,1.6e-6,1.8e-6,2.0e-6]:
    for R in [3e9,4e9,5e9,6e9,7e9,8e9,10e9,1e12]:
        os.environ['WL']=str(L); os.environ['WR']=str(R)
        e,rho,n=score(); res.append((e,L,R,rho,n))
res.sort()
for r in res[:8]: print(r)
os.environ['WMODE']='const'; print('const', score())
