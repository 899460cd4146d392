"""Our `verify` against KernelBench's own evaluation protocol, same problem, same candidate, same run.

KernelBench's protocol (re-implemented here from its published eval loop, run in a fresh process as
its scripts do): exec both sources, build Model and ModelNew under one seed, then 5 correctness
trials each calling get_inputs() on the CPU and moving the tensors to the GPU, then get_inputs()
once more, 3 warm-ups and 100 timed trials with CUDA events. Ours: WorkerEvaluator.evaluate with
5 correctness trials and 100 timing trials (cold: first call; warm: with a pre-started worker).

    python benchmarks/bench_kernelbench_protocol.py OUT.json [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

KB_PROTOCOL = textwrap.dedent('''
    import importlib.util, random, sys, time, torch
    def load(path, name):
        spec = importlib.util.spec_from_file_location(name, path)
        m = importlib.util.module_from_spec(spec); sys.modules[name] = m; spec.loader.exec_module(m); return m
    ref = load(sys.argv[1], "ref"); cand = load(sys.argv[2], "cand")
    for k, v in eval(sys.argv[3]).items():
        setattr(ref, k, v)
    dev = sys.argv[4]
    torch.manual_seed(42); init = ref.get_init_inputs()
    model = ref.Model(*init).to(dev)
    torch.manual_seed(42); model_new = cand.ModelNew(*init).to(dev)
    gen = random.Random(42); ok = 0
    with torch.no_grad():
        for trial in range(5):
            seed = gen.randint(0, 2**31)
            torch.manual_seed(seed); inputs = [x.to(dev) if torch.is_tensor(x) else x for x in ref.get_inputs()]
            out = model(*inputs)
            torch.manual_seed(seed); out_new = model_new(*inputs)
            if dev == "cuda": torch.cuda.synchronize()
            ok += bool(out.shape == out_new.shape and torch.allclose(out, out_new, atol=1e-2, rtol=1e-2))
            del out, out_new, inputs
        inputs = [x.to(dev) if torch.is_tensor(x) else x for x in ref.get_inputs()]
        times = []
        for _ in range(3): model_new(*inputs)
        if dev == "cuda":
            torch.cuda.synchronize()
            for _ in range(100):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record(); model_new(*inputs); e.record(); torch.cuda.synchronize(); times.append(s.elapsed_time(e))
    print({"correct_trials": ok, "mean_ms": sum(times) / len(times) if times else None})
''')


async def ours(reference: str, candidate: str, overrides: dict, interpreter: bool, scratch: Path) -> dict:
    from egg_mcp.contract import EvalOptions, LOOSE
    from egg_mcp.evaluation.engine import WorkerEvaluator

    ev = WorkerEvaluator(scratch_dir=scratch, force_interpreter=interpreter)
    opts = EvalOptions(tolerance=LOOSE, correctness_trials=5, timing_trials=100, size_overrides=overrides)
    out = {}
    try:
        for label in ("cold", "warm"):
            if label == "warm" and hasattr(ev, "wait_pool_ready"):
                await ev.wait_pool_ready(timeout_s=300)
            t0 = time.perf_counter()
            r = await ev.evaluate(reference, candidate, opts)
            out[label] = {"wall_s": round(time.perf_counter() - t0, 2), "verdict": r.verdict, "summary": r.summary,
                          "median_ms": r.timing.median_ms if r.timing else None}
    finally:
        await ev.aclose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--smoke", action="store_true", help="CPU plumbing check at tiny sizes")
    args = parser.parse_args()
    here = REPO / "benchmarks" / "kb_protocol"
    overrides = {"batch_size": 16, "dim": 64} if args.smoke else {}
    result: dict = {"problem": "relu_large (KernelBench L1 elementwise sizes)", "overrides": overrides}
    with tempfile.TemporaryDirectory() as tmp:
        result["ours"] = asyncio.run(ours((here / "relu_large.py").read_text(), (here / "relu_triton.py").read_text(),
                                          overrides, args.smoke, Path(tmp)))
        Path(args.out).write_text(json.dumps(result, indent=1))
        print(json.dumps(result, indent=1), flush=True)
        env_cmd = [sys.executable, "-c", KB_PROTOCOL, str(here / "relu_large.py"), str(here / "relu_triton.py"),
                   repr(overrides), "cpu" if args.smoke else "cuda"]
        env = None
        if args.smoke:
            import os

            env = dict(os.environ, TRITON_INTERPRET="1")
        t0 = time.perf_counter()
        proc = subprocess.run(env_cmd, capture_output=True, text=True, env=env, timeout=900)
        result["kernelbench_protocol"] = {"wall_s": round(time.perf_counter() - t0, 2), "rc": proc.returncode,
                                          "stdout": proc.stdout.strip()[-500:], "stderr": proc.stderr.strip()[-800:]}
    kb = result["kernelbench_protocol"]["wall_s"]
    result["ratio_warm_vs_kernelbench"] = round(result["ours"]["warm"]["wall_s"] / kb, 4)
    result["ratio_cold_vs_kernelbench"] = round(result["ours"]["cold"]["wall_s"] / kb, 4)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
