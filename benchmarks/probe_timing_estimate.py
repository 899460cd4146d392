"""Does the method-picking estimate carry the host's launch gaps or a clock ramp? A two-kernel softmax (the demo's
seed_split_row): five estimate samples plain, behind a 0.5 ms spin, after a 20 ms warm spin, after 0, 2 and 5 s idle;
then six verifies through the engine (method, estimate). GPU only:

    python3 benchmarks/probe_timing_estimate.py
"""
import asyncio, importlib.util, json, statistics, sys, tempfile, time, torch
from pathlib import Path
from egg_mcp.problems.builtin import builtin_source
from egg_mcp.evaluation.timing import GpuTimer
ns = {}; exec(builtin_source("softmax"), ns)
path = "egg_mcp/e2e/demo_kernels/softmax/seed_split_row.py"
spec = importlib.util.spec_from_file_location("ssr", path)
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
model = m.ModelNew().cuda()
xs = [x.cuda() for x in ns["get_inputs"]()]
fn = lambda a: model(*a)
t = GpuTimer(torch.cuda.current_device())
def samples(spin_ms=0.0, warm_ms=0.0):
    if warm_ms: torch.cuda._sleep(int(warm_ms * 2e6))
    host = []
    for _ in range(3):
        h = time.perf_counter(); fn(xs); host.append((time.perf_counter() - h) * 1e3)
    torch.cuda.synchronize()
    out = []
    for _ in range(5):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t._flush()
        if spin_ms: torch.cuda._sleep(int(spin_ms * 2e6))
        s.record(); fn(xs); e.record(); torch.cuda.synchronize(); out.append(round(s.elapsed_time(e), 4))
    return out, [round(h, 4) for h in host]
for idle in (0.0, 2.0, 5.0):
    for label, kw in (("plain", {}), ("spin", {"spin_ms": 0.5}), ("warm20", {"warm_ms": 20})):
        time.sleep(idle)
        clk = t.nvml.read().get("sm_clock_mhz")
        out, host = samples(**kw)
        print(f"idle {idle}s {label:6s} clock {clk} est_samples {out} median {statistics.median(out):.4f} host_enqueue {host}", flush=True)

async def verifies():
    from egg_mcp.contract import EvalOptions
    from egg_mcp.evaluation.engine import WorkerEvaluator
    ev = WorkerEvaluator(scratch_dir=Path(tempfile.mkdtemp()), spare_workers=1)
    await ev.start_pool()
    try:
        for i in range(6):
            await asyncio.sleep(2.0 if i % 2 else 0.0)
            r = await ev.evaluate(builtin_source("softmax"), Path(path).read_text(), EvalOptions())
            tm = r.timing
            print("verify", i, r.verdict, tm.method, round(tm.median_ms, 4), round(tm.estimate_ms, 4), tm.graph_fallback, tm.sm_clock_mhz, flush=True)
    finally:
        await ev.aclose()
asyncio.run(verifies())
