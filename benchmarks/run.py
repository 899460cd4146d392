"""The GPU benchmark record: named suites, each writing OUT/<suite>.json stamped with what produced it.

    python3 benchmarks/run.py SUITE [SUITE ...] --out DIR [--quick]
    python3 benchmarks/run.py --list

Every output file carries the git commit (and whether the tree was dirty), the Python / torch / Triton
versions, the GPU (name, UUID, driver, SM and memory clocks) and the start time, next to the suite's own
result. Measurements go through the real engine (WorkerEvaluator jobs, the project's GpuTimer). This
replaces the gpu_batch*.sh notebook (kept, with their result files, as history).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

AGREEMENT_CASES = {  # (kernel file in benchmarks/tiling_kernels, dtype, size overrides)
    "softmax": ("softmax", "float32", {"batch_size": 4096, "dim": 8192}),
    "layernorm": ("layernorm", "bfloat16", {"batch_size": 16384, "hidden": 2048}),
    "gemm": ("gemm_bias_relu", "bfloat16", {"batch_size": 4096, "in_features": 4096, "out_features": 4096}),
}
AGREEMENT_TOLERANCE = 0.01


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def provenance() -> dict[str, Any]:
    """What produced a result file: code, versions, GPU and clocks (NVML; no CUDA context in this process)."""
    from importlib.metadata import PackageNotFoundError, version

    def ver(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    record: dict[str, Any] = {
        # A copied tree without .git (the GPU machine's) names its commit in EGG_MCP_GIT_COMMIT.
        # (a copied tree may carry a stale .git: the variable, when set, wins)
        "git_commit": os.environ.get("EGG_MCP_GIT_COMMIT") or _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain")),
        "python": platform.python_version(), "torch": ver("torch"), "triton": ver("triton"),
        "egg_mcp": ver("egg-mcp"), "host": platform.node(),
        "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "gpus": [],
    }
    try:
        import pynvml

        pynvml.nvmlInit()
        dec = lambda v: v.decode() if isinstance(v, bytes) else v  # noqa: E731
        record["driver"] = dec(pynvml.nvmlSystemGetDriverVersion())
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            gpu = {"index": i, "name": dec(pynvml.nvmlDeviceGetName(h)), "uuid": dec(pynvml.nvmlDeviceGetUUID(h))}
            for key, fn, clock in (("sm_clock_mhz", "nvmlDeviceGetClockInfo", "NVML_CLOCK_SM"),
                                   ("sm_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_SM"),
                                   ("mem_clock_mhz", "nvmlDeviceGetClockInfo", "NVML_CLOCK_MEM")):
                try:
                    gpu[key] = int(getattr(pynvml, fn)(h, getattr(pynvml, clock)))
                except Exception:  # noqa: BLE001
                    pass
            record["gpus"].append(gpu)
        pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001 - no driver: said so in the record
        record["gpus_error"] = f"{type(exc).__name__}: {exc}"
    return record


# ------------------------------------------------------------------------------------------ suites


def suite_calibrate(out: Path, quick: bool, ncu: bool = False) -> dict[str, Any]:
    """`egg-mcp calibrate` through the engine: each ceiling beside its ncu-style / datasheet peak, the peak at
    the clock under load, and the reason label (explained or not)."""
    from benchmarks.engine_jobs import evaluator
    from egg_mcp.calibration.run import calibrate, describe

    async def go():
        ev = evaluator()
        try:
            return await calibrate(ev, None, quick=quick, ncu=ncu)
        finally:
            await ev.aclose()

    cal = asyncio.run(go())
    lines = describe(cal)
    print("\n".join(lines))
    return {"calibration": cal.model_dump(mode="json"), "table": lines,
            "outside_10pct_of_peak": [c.key for c in cal.ceilings if c.ratio_to_peak and c.ratio_to_peak < 0.9],
            "unexplained": {c.key: c.reason for c in cal.ceilings if c.explained is False}}


def suite_calibrate_ncu(out: Path, quick: bool) -> dict[str, Any]:
    """calibrate plus, in one ncu-wrapped job (~30 s more), each GEMM's pipe busy share and the L2 probe's
    SM-read path (rate, ncu's sustained peak, the slices' return-path busy share; lts__t_bytes as context): the
    l2_read row beside ncu's peak for that path, its reading under calibration.ceilings[].ncu_l2."""
    return suite_calibrate(out, quick, ncu=True)


def _agreement_case(name: str) -> tuple[str, str, dict[str, int]]:
    file, dtype, overrides = AGREEMENT_CASES[name]
    return (REPO / "benchmarks" / "tiling_kernels" / f"{file}.py").read_text(), dtype, overrides


def suite_tiling_agreement(out: Path, quick: bool) -> dict[str, Any]:
    """The same config timed as a tiling trial and by verify, in the same run: must agree within 1 %.

    benchmarks/agreement.py says what each side does and why the order matters: one discarded trial to
    heat the GPU and fill the Triton cache, then trial, verify, verify, trial (ABBA: a linear drift of the
    GPU's clock cancels), each reading with its CV, method, clock and throttle reasons, and NVML clock /
    power / temperature over each job from this process; the power-bound GEMM reads three ABBA rounds
(agreement.ROUNDS). ~3 min on the H200."""
    from benchmarks import agreement
    from benchmarks.engine_jobs import evaluator
    from egg_mcp.calibration.sampler import LoadSampler, nvml_reader
    from egg_mcp.contract import EvalOptions, default_tolerance

    read = _host_nvml_reader(nvml_reader)

    async def case(ev, name: str) -> dict[str, Any]:
        source, dtype, overrides = _agreement_case(name)
        tol = default_tolerance(dtype)

        async def trial() -> dict[str, Any]:
            got = await ev.run_job("egg_mcp.tiling.measure:measure_configs", {
                "reference_source": source, "dtype": dtype, "size_overrides": overrides, "atol": tol.atol,
                "rtol": tol.rtol, "device": "cuda", "compile_workers": 0,
                "candidates": [{"config": {}, "source": source}]}, timeout_s=240, uses_gpu=True)
            if not got.ok:
                raise RuntimeError(f"tiling trial failed: {got.error.message if got.error else got.stderr_tail[-300:]}")
            return got.result["results"][0]

        async def verify():
            return await ev.evaluate(source, source, EvalOptions(dtype=dtype, tolerance=tol, size_overrides=overrides))

        watch = (lambda: LoadSampler(read, interval_s=0.02, settle_s=0.0)) if read else None
        return {"case": name, "dtype": dtype, "sizes": overrides,
                **await agreement.run_case(trial, verify, watch, order=agreement.order_for(name))}

    async def go():
        ev = evaluator()
        try:
            return [await case(ev, name) for name in (["softmax", "layernorm"] if quick else AGREEMENT_CASES)]
        finally:
            await ev.aclose()

    started = time.perf_counter()
    rows = asyncio.run(go())
    for r in rows:
        if r.get("ratio") is None:
            print(f"[{r['case']}] {r['verdict']}")
            continue
        print(f"[{r['case']}] trial {r['trial_ms']:.5f} ms (CV {r['trial_cv']:.2%}), verify {r['verify_ms']:.5f} ms "
              f"(CV {r['verify_cv']:.2%}), ratio {r['ratio']:.4f}; readings T {r['trial_readings_ms']} "
              f"V {r['verify_readings_ms']}; {r['verdict']}")
    return {"cases": rows, "tolerance": agreement.TOLERANCE, "order": list(agreement.ORDER), "rounds": agreement.ROUNDS,
            "all_within": all(r.get("within_1pct") for r in rows), "wall_s": round(time.perf_counter() - started, 1)}


def _host_nvml_reader(nvml_reader) -> Callable[[], dict[str, Any]] | None:
    """NVML of GPU 0 read from this (bench) process, which holds no CUDA context; None without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return nvml_reader(pynvml, pynvml.nvmlDeviceGetHandleByIndex(0))
    except Exception:  # noqa: BLE001 - no NVML: the readings still carry the timer's own clock
        return None


def _script_suite(script: str, script_out: Path, flags: list[str], *, timeout_s: int) -> dict[str, Any]:
    """Run benchmarks/<script>.py into its own folder; the record holds its argv, exit code, stderr tail,
    report path and the <script>.json it wrote (None if it wrote none)."""
    argv = [sys.executable, str(REPO / "benchmarks" / f"{script}.py"), str(script_out), *flags]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout_s)
    print(proc.stdout[-3000:])
    data_path = script_out / f"{script}.json"
    data = json.loads(data_path.read_text()) if data_path.exists() else None
    return {"argv": argv[1:], "exit_code": proc.returncode, "stderr_tail": proc.stderr[-2000:],
            "report": str(script_out / f"{script}.md"), script: data}


def suite_tiling_search(out: Path, quick: bool) -> dict[str, Any]:
    """benchmarks/tiling_search.py: the model's rank vs measured time (Spearman per case), its pick vs the
    measured best, on the ten tiling cases and the multi-kernel KernelBench cases, through the engine and
    GpuTimer (< 4 min; quick: fewer configs per case and 10 timed runs, < 2.5 min)."""
    flags = ["--quick", "--max-wall-s", "140"] if quick else ["--max-wall-s", "225"]
    return _script_suite("tiling_search", out / "tiling_search", flags, timeout_s=300)


def suite_tiling_exhaustive(out: Path, quick: bool) -> dict[str, Any]:
    """benchmarks/tiling_bench.py: every config of the ten tiling cases measured, the search replayed on
    them (quick: fewer timed runs per config, no autotune comparison, a 230 s budget)."""
    flags = ["--autotune", "", "--max-wall-s", "230", "--timing-trials", "10"] if quick else ["--max-wall-s", "540"]
    return _script_suite("tiling_bench", out / "tiling_exhaustive", flags, timeout_s=600)


def suite_tiling_client(out: Path, quick: bool) -> dict[str, Any]:
    """propose_tiling on 4 client KernelBench kernels (plain/split-K/persistent GEMM, MinGPT): never slower, ~5 min"""
    flags = ["--budget-s", "40", "--max-wall-s", "240"] if quick else []
    record = _script_suite("tiling_client_kernels", out / "tiling_client", flags, timeout_s=540)
    record["all_checks_pass"] = record["exit_code"] == 0  # 1: a recommendation measured slower, or a kernel failed
    return record


def suite_guidance(out: Path, quick: bool) -> dict[str, Any]:
    """benchmarks/guidance_suite.py: the real server in-process on KernelBench 76 (GEMM+bias+ReLU) and 43 (causal
    attention, batch 32) at fp32 1e-4 with own IEEE and 3xTF32 kernels: seed brief, verdicts, profile sizes,
    tiling rank correlation (issue 18's Done-when; ~4 min: optional steps past its wall budget are recorded as
    skipped, a failed step as failed, and the suite goes on)."""
    from benchmarks.guidance_suite import run_all, summary

    result = asyncio.run(run_all(Path(tempfile.mkdtemp(prefix="egg-guidance-ws-")), quick))
    for p in result["problems"]:
        print(json.dumps(summary(p)))
    print(f"all guidance checks pass: {result['all_checks_pass']}")
    return result  # all_checks_pass false makes run.py exit non-zero


def _script(name: str, argv_tail: list[str], timeout: int) -> Callable[[Path, bool], dict[str, Any]]:
    def run(out: Path, quick: bool) -> dict[str, Any]:
        target = out / f"{name}.raw.json"
        proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / argv_tail[0]), str(target), *argv_tail[1:]],
                              cwd=REPO, capture_output=True, text=True, timeout=timeout)
        print(proc.stdout[-2000:])
        return {"exit_code": proc.returncode, "stderr_tail": proc.stderr[-2000:],
                "result": json.loads(target.read_text()) if target.exists() else None}

    run.__doc__ = f"benchmarks/{argv_tail[0]} (its own JSON, embedded)"
    return run


def suite_verify_latency(out: Path, quick: bool) -> dict[str, Any]:
    """verify wall time through MCP: one-shot vs persistent judge, back to back and with think time (issue 12)"""
    from benchmarks.verify_latency import suite_verify_latency as run

    return run(out, quick)


def suite_verify_latency_light(out: Path, quick: bool) -> dict[str, Any]:
    """verify_latency with a 64x64x32 GEMM (its own compile 0.5-0.7 s, not 2.4-2.8), persistent judge only"""
    from benchmarks.verify_latency import suite_verify_latency as run

    return run(out, quick, light=True)


def suite_verify_sizes(out: Path, quick: bool) -> dict[str, Any]:
    """verify's overhead (wall - compile - candidate GPU) on a GEMM, level1/23 Softmax full size, a 2 GiB ReLU"""
    from benchmarks.verify_sizes import suite_verify_sizes as run

    return run(out, quick)


def suite_lanes(out: Path, quick: bool) -> dict[str, Any]:
    """CPU + Ray: candidates/hour through a local Ray cluster with two lanes vs one (target >= 1.5x)."""
    from benchmarks.bench_lanes import throughput

    return throughput(n_jobs=4 if quick else 12)


def suite_lanes_gpu(out: Path, quick: bool) -> dict[str, Any]:
    """GPU: the lane path a Ray node runs vs the plain engine: same verdicts, medians within 3 % (< 2 min on an H200)"""
    from benchmarks.bench_lanes import lane_path_vs_plain

    result = asyncio.run(lane_path_vs_plain(rounds=1 if quick else 2))
    print(json.dumps(result["summary"], indent=1))
    return result


def suite_test_cpu(out: Path, quick: bool) -> dict[str, Any]:
    """CPU: the README's pytest command under a /proc sampler: CPU seconds by process role and the wall (~10 min)."""
    from benchmarks.proc_cpu import suite_test_cpu as run

    return run(out, quick)


SUITES: dict[str, Callable[[Path, bool], dict[str, Any]]] = {
    "lanes": suite_lanes,
    "lanes_gpu": suite_lanes_gpu,
    "calibrate": suite_calibrate,
    "calibrate_ncu": suite_calibrate_ncu,
    "tiling_agreement": suite_tiling_agreement,
    "tiling_search": suite_tiling_search,
    "tiling_exhaustive": suite_tiling_exhaustive,
    "tiling_client": suite_tiling_client,
    "guidance": suite_guidance,
    "verify": _script("verify", ["bench_verify.py"], 200),
    "ncu_agreement": _script("ncu_agreement", ["bench_ncu_agreement.py"], 240),
    "profiling": _script("profiling", ["profiling_bench.py"], 240),
    "verify_latency": suite_verify_latency,
    "verdicts": _script("verdicts", ["verdicts.py"], 590),
    "verify_latency_light": suite_verify_latency_light,
    "verify_sizes": suite_verify_sizes,
    "test_cpu": suite_test_cpu,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suites", nargs="*", help=f"one or more of: {', '.join(SUITES)}")
    parser.add_argument("--out", type=Path, default=None, help="output folder (one <suite>.json per suite)")
    parser.add_argument("--quick", action="store_true", help="the short form of each suite (see its doc)")
    parser.add_argument("--list", action="store_true", help="list the suites and exit")
    args = parser.parse_args(argv)
    if args.list or not args.suites:
        for name, fn in SUITES.items():
            print(f"{name:<18} {(fn.__doc__ or '').strip().splitlines()[0]}")
        return 0 if args.list else 2
    unknown = [s for s in args.suites if s not in SUITES]
    if unknown:
        print(f"unknown suite(s) {unknown}; use one of {list(SUITES)}", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="egg-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in args.suites:
        record = {"suite": name, "quick": args.quick, "provenance": provenance()}
        t0 = time.perf_counter()
        try:
            record["result"] = SUITES[name](out, args.quick)
            if isinstance(record["result"], dict) and record["result"].get("all_checks_pass") is False:
                failed += 1
        except Exception as exc:  # noqa: BLE001 - recorded; the other suites still run
            record["error"] = f"{type(exc).__name__}: {exc}"
            failed += 1
        record["wall_s"] = round(time.perf_counter() - t0, 2)
        (out / f"{name}.json").write_text(json.dumps(record, indent=1))
        print(f"== {name}: {'ERROR ' + record['error'] if 'error' in record else 'done'} in {record['wall_s']} s "
              f"-> {out / f'{name}.json'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
