"""Which timing method agrees with Nsight Compute, and at what spread? (GPU + ncu; a probe, not a test)

    python benchmarks/probe_timing_methods.py OUT.json [case,case,...]

bench_ncu_agreement (benchmarks/results/archive/h200_2026-11-30/ncu_agreement_h200_graph_200us.json) found
verify's time 2.6-7.9 % above ncu's `gpu__time_duration` for 17-266 us kernels and 14-42 % below it for
1.5-3.6 us kernels. Two suspects, both tested here in one run per case against ncu on the same kernel:
  * dirty L2: our flush zeroes a 2xL2 buffer, so the timed kernel first writes back up to an L2 of
    dirty lines; in graph replay each call writes back the previous call's output. ncu starts every
    launch from a flushed, clean L2. A *read* flush (a reduction over the buffer) leaves it clean.
  * launch context: graph replay times back-to-back launches (replay time / calls), ncu one isolated
    launch from its start to its end.
Methods:
  current            GpuTimer.measure, what verify reports (graph below 200 us, events above)
  events_zero        per call: zero flush, event, call, event (the events path today)
  events_read        per call: read flush, event, call, event
  graph_ev_read      one CUDA graph of [read flush, event, call, event] x N, per-call event pairs
  graph_ev_zero      the same with the zero flush
  graph_ev_rot       one graph of [event, call, event] x N over rotating input sets, no flush
  cupti_loop_read    per call: read flush, call (host loop); the call's kernel durations from CUPTI
                     (torch.profiler device activity: the GPU's own start/end timestamps, as ncu's)
  cupti_graph_read   one graph of [read flush, call] x N under the profiler, the same per call
  cupti_graph_rot    one graph of [call] x N over rotating input sets (steady state, per kernel)
`PROBE_METHODS=a,b` limits the run to some methods (current is always measured). The cupti_*_read
columns of benchmarks/results/archive/h200_2026-11-30/timing_methods_h200_cupti.json predate the
split_calls grouping (the flush's memset split each call in two there).
The child mode (`--child CASE N`) runs the case's forward N times for ncu.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

EMPTY = '''
import torch, torch.nn as nn, triton, triton.language as tl
class Model(nn.Module):
    def forward(self, x):
        return x
batch_size = 1
def get_inputs():
    return [torch.randn(1024)]
def get_init_inputs():
    return []
@triton.jit
def empty_kernel(x_ptr):
    pass
class ModelNew(nn.Module):
    def forward(self, x):
        empty_kernel[(1,)](x)
        return x
'''
SOFTMAX = (ROOT / "tests" / "fixtures" / "softmax" / "row_per_program.py").read_text()
KERNELS = ROOT / "benchmarks" / "tiling_kernels"


def cases() -> dict[str, dict]:
    from egg_mcp.problems.builtin import builtin_source

    out = {"empty": {"reference": EMPTY, "candidate": EMPTY, "dtype": "float32", "sizes": {}}}
    for rows, cols in ((64, 256), (1024, 1024), (4096, 2048), (4096, 8192), (16384, 8192)):
        out[f"softmax_{rows}x{cols}"] = {"reference": builtin_source("softmax"), "candidate": SOFTMAX,
                                         "dtype": "float32", "sizes": {"batch_size": rows, "dim": cols}}
    for name, dtype in (("layernorm", "bfloat16"), ("row_sum", "float32"), ("bias_gelu", "bfloat16")):
        text = (KERNELS / f"{name}.py").read_text()
        out[name] = {"reference": text, "candidate": text, "dtype": dtype, "sizes": {}}
    return out


def load(case: dict, workdir: Path):
    """(forward(inputs), make_inputs(k)) for the case's candidate, on the GPU."""
    import torch

    from egg_mcp.evaluation.harness import Problem, apply_size_overrides
    from egg_mcp.problems.modules import import_source

    ref = import_source(case["reference"], workdir / "ref_mod.py", f"probe_ref_{os.getpid()}")
    cand = import_source(case["candidate"], workdir / "cand_mod.py", f"probe_cand_{os.getpid()}")
    apply_size_overrides(ref, cand, case["sizes"])
    dtype = getattr(torch, case["dtype"])
    problem = Problem(ref, "cuda", dtype)
    model = problem.build(cand.ModelNew, problem.init_inputs(1), 1)
    cache: dict[int, list] = {}

    def make_inputs(k: int) -> list:
        if k not in cache:
            cache[k] = problem.inputs(100 + k)
        return cache[k]

    def forward(xs):
        with torch.no_grad():
            return model(*xs)

    return forward, make_inputs


def child(name: str, n: int) -> None:
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        forward, make_inputs = load(cases()[name], Path(tmp))
        sets = [make_inputs(k) for k in range(4)]
        for i in range(n):
            forward(sets[i % 4])
        torch.cuda.synchronize()


def ncu_median(name: str, case: dict, scratch: Path) -> dict:
    from egg_mcp.profiling.ncu_csv import parse_ncu_output, short_kernel_name
    from egg_mcp.profiling.ncu_command import find_ncu, kernel_filter, triton_kernel_names

    ncu = find_ncu()
    log = scratch / f"{name}.csv"
    argv = [ncu, "--csv", "--page", "raw", "--print-units", "base", "--metrics", "gpu__time_duration.sum",
            "--clock-control", "none", "-k", kernel_filter(triton_kernel_names(case["candidate"])),
            "--log-file", str(log), "--", sys.executable, __file__, "--child", name, "30"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    parsed = parse_ncu_output(log.read_text(errors="replace") if log.exists() else "")
    per_kernel: dict[str, list[float]] = {}
    for launch in parsed.launches:
        value = launch.value("gpu__time_duration.sum")
        if value is not None:
            per_kernel.setdefault(short_kernel_name(launch.kernel_name), []).append(value / 1e6)
    if not per_kernel:
        raise RuntimeError(f"ncu profiled nothing (exit {proc.returncode}): {proc.stderr[-800:]}")
    # skip the first launches (compile / first touch), as the timer's warm-up does
    medians = {k: statistics.median(v[5:] or v) for k, v in per_kernel.items()}
    return {"median_ms": sum(medians.values()), "per_kernel": medians, "launches": {k: len(v) for k, v in per_kernel.items()}}


def spread(times: list[float]) -> dict:
    from egg_mcp.evaluation.timing import summarize

    s = summarize(times)
    return {"median_ms": s["median_ms"], "cv": s["cv"], "n": len(times)}


def methods(forward, make_inputs) -> dict[str, dict]:
    import torch

    from egg_mcp.evaluation.timing import GpuTimer, split_calls, tensor_bytes

    timer = GpuTimer()
    flush_i64 = timer.flush_buffer.view(torch.int64)
    flush_out = torch.empty((), dtype=torch.int64, device="cuda")

    def zero_flush():
        timer.flush_buffer.zero_()

    def read_flush():
        torch.sum(flush_i64, dim=0, out=flush_out)

    first = make_inputs(0)
    input_bytes = max(1, tensor_bytes(first))
    n_sets = max(1, min(64, math.ceil(2 * timer.l2_bytes / input_bytes)))
    sets = [make_inputs(k) for k in range(n_sets)]
    est = timer.estimate_ms(forward, first)
    out: dict[str, dict] = {"estimate_ms": {"median_ms": est}}

    stats, extra = timer.measure(forward, make_inputs)
    out["current"] = {"median_ms": stats.median_ms, "cv": stats.cv, "n": stats.n_runs, "method": stats.method}

    def per_call_events(flush, n=200):
        times = []
        for i in range(n):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            flush()
            s.record()
            forward(sets[i % min(n_sets, 3)])
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
        return spread(times)

    wanted = {m for m in os.environ.get("PROBE_METHODS", "").split(",") if m}

    def want(label: str) -> bool:
        return not wanted or label in wanted

    if want("events_zero"):
        out["events_zero"] = per_call_events(zero_flush)
    if want("events_read"):
        out["events_read"] = per_call_events(read_flush)

    def captured(body, flush):
        """A CUDA graph of body() after a warm-up of every input set (and the flush) on a side stream."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for k in range(n_sets):
                forward(sets[k])
            if flush:
                flush()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            body()
        return graph

    def graph_events(flush, calls: int, replays: int):
        starts = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(calls)]
        ends = [torch.cuda.Event(enable_timing=True, external=True) for _ in range(calls)]
        def body():
            for i in range(calls):
                if flush:
                    flush()
                starts[i].record()
                forward(sets[i % n_sets])
                ends[i].record()

        graph = captured(body, flush)
        times = []
        t0 = time.perf_counter()
        for _ in range(replays):
            graph.replay()
            torch.cuda.synchronize()
            times += [s.elapsed_time(e) for s, e in zip(starts, ends)]
        result = spread(times)
        result["wall_s"] = time.perf_counter() - t0
        return result

    for label, flush in (("graph_ev_read", read_flush), ("graph_ev_zero", zero_flush), ("graph_ev_rot", None)):
        if not want(label):
            continue
        try:
            out[label] = graph_events(flush, calls=100, replays=5)
        except Exception as exc:  # noqa: BLE001 - e.g. timing events not allowed in graphs
            out[label] = {"error": "".join(traceback.format_exception_only(exc)).strip()[:400]}
            torch.cuda.synchronize()

    from torch.profiler import ProfilerActivity, profile

    def kernel_durations(work) -> tuple[list[tuple[str, int, int]], float]:
        """[(name, start_ns, duration_ns)] of the GPU kernels `work` ran, and the profiler's wall s."""
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            work()
            torch.cuda.synchronize()
        rows = [(e.name(), e.start_ns(), e.duration_ns()) for e in prof.profiler.kineto_results.events()
                if str(e.device_type()).endswith("CUDA") and e.duration_ns() > 0]
        return sorted(rows, key=lambda r: r[1]), time.perf_counter() - t0

    flush_rows = kernel_durations(lambda: [read_flush() for _ in range(3)])[0]
    flush_names = {name for name, _, _ in flush_rows}
    signature = max(flush_rows, key=lambda r: r[2])[0]  # the reduction; its memset is a prelude
    out["flush_kernel_names"] = {"names": sorted(flush_names)}

    def per_call(rows) -> list[float]:
        """Per-call sum of kernel durations between flushes (ms), grouped as verify groups them."""
        return [sum(g.values()) for g in split_calls(rows, signature, flush_names - {signature})]

    def cupti_loop():
        def work():
            for i in range(100):
                read_flush()
                forward(sets[i % min(n_sets, 3)])
            read_flush()
        rows, wall = kernel_durations(work)
        result = spread(per_call(rows)[5:])
        result["profiler_wall_s"] = wall
        return result

    def cupti_graph(flush, calls: int = 60, replays: int = 3):
        def body():
            for i in range(calls):
                if flush:
                    read_flush()
                forward(sets[i % n_sets])
            read_flush()  # a separator, so the last call is closed

        graph = captured(body, read_flush)
        rows, wall = kernel_durations(lambda: [graph.replay() for _ in range(replays)])
        if flush:
            times = per_call(rows)
        else:  # no flush between calls: group by the candidate's kernel sequence length per call
            names = [n for n, _, _ in rows if n not in flush_names]
            per = max(1, len(names) // (calls * replays))
            durs = [d / 1e6 for n, _, d in rows if n not in flush_names]
            times = [sum(durs[i:i + per]) for i in range(0, len(durs) - per + 1, per)]
        result = spread(times)
        result["profiler_wall_s"] = wall
        return result

    for label, fn in (("cupti_loop_read", cupti_loop), ("cupti_graph_read", lambda: cupti_graph(True)),
                      ("cupti_graph_rot", lambda: cupti_graph(False))):
        if not want(label):
            continue
        try:
            out[label] = fn()
        except Exception as exc:  # noqa: BLE001
            out[label] = {"error": "".join(traceback.format_exception_only(exc)).strip()[:400]}
            torch.cuda.synchronize()
    return out


def main(out_path: Path, only: set[str]) -> None:
    import torch

    report: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": {}, "errors": {}}
    for name, case in cases().items():
        if only and name not in only:
            continue
        try:
            with tempfile.TemporaryDirectory() as tmp:
                forward, make_inputs = load(case, Path(tmp))
                row = methods(forward, make_inputs)
                row["ncu"] = ncu_median(name, case, Path(tmp))
            ref = row["ncu"]["median_ms"]
            report["rows"][name] = row
            line = " ".join(f"{k}={v['median_ms'] / ref:.3f}(cv {v.get('cv', 0) * 100:.1f}%)"
                            for k, v in row.items() if k not in ("ncu", "estimate_ms") and "median_ms" in v)
            line += f" | ncu {ref * 1e3:.2f} us, graph_ev_read {row.get('graph_ev_read', {}).get('median_ms', 0) * 1e3:.2f} us"
            print(f"{name:<20} ncu {ref * 1e3:8.2f} us | {line}", flush=True)
            for k, v in row.items():
                if "error" in v:
                    print(f"   {k}: {v['error']}", flush=True)
        except Exception as exc:  # noqa: BLE001
            report["errors"][name] = "".join(traceback.format_exception(exc))[-1500:]
            print(f"{name}: ERROR {report['errors'][name][-400:]}", flush=True)
        out_path.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]))
    else:
        main(Path(sys.argv[1]), {c for c in (sys.argv[2] if len(sys.argv) > 2 else "").split(",") if c})
