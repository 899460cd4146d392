"""Lanes: throughput with two lanes vs one through Ray (CPU), and the lane path vs the plain engine (GPU).

    python3 benchmarks/run.py lanes --out DIR       # CPU: a local Ray cluster, 1 lane vs 2, candidates/hour
    python3 benchmarks/run.py lanes_gpu --out DIR   # GPU: what a Ray node runs for a job vs WorkerEvaluator

`lanes`: a local Ray cluster (`ray.init(num_cpus=2, num_gpus=2)`: Ray's logical GPUs stand in for
devices, the interpreter does the work), `connect(max_lanes=n)`, a warm-up job per lane, a wait until
our process tree is quiet (each lane's spare judge and next runner started: the steady state between
two candidates of a running server), then N distinct verifies of the AddRelu fixture at once;
throughput = N / wall of the timed round. Each row also carries the machine's load average before and
after, and the CPU seconds our processes burned by role (benchmarks/proc_cpu.py), so a loaded run can
be told from an idle one and our overhead from other users' load.
`lanes_gpu`: one H200, no Ray (its wheel cannot travel to the GPU machine): the same candidate verified
by a plain `WorkerEvaluator`, by `NodeLane.run` (the very code a Ray actor runs for a job: the spec as
data through `job_specs.execute` on the node's engine) and by a `LanePool` of local lanes (`serve`'s path);
verdicts must agree and the medians lie within noise of each other.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SETTLE_BUDGET_S = 60.0
"""lanes_gpu: the most its waits for spares (start and between timed verifies) may take in all."""
FIXTURES = REPO / "tests" / "fixtures" / "bench"
ADD_RELU = (FIXTURES / "problems" / "level1" / "2_AddRelu.py").read_text()
ADD_RELU_OK = (FIXTURES / "solutions" / "2_AddRelu.py").read_text()


async def _device_round(pool, n: int, hold_s: float) -> tuple[float, list[str]]:
    """n jobs that hold their lane's device for `hold_s` (a worker job sleeping: what a GPU kernel's time is
    to the pool) and use almost no CPU: the dispatch and Ray overhead without the interpreter's CPU load."""
    t0 = time.perf_counter()
    outs = await asyncio.gather(*(pool.run_job("tests.doubles.jobs:echo", {"sleep_s": hold_s, "i": i},
                                               timeout_s=120, uses_gpu=True) for i in range(n)))
    return time.perf_counter() - t0, ["ok" if o.ok else "failed" for o in outs]


async def _round(pool, n: int, tag: str) -> tuple[float, list[str]]:
    from egg_mcp.contract import EvalOptions

    opts = EvalOptions(device="interpreter", size_overrides={"batch_size": 8, "dim": 300})
    t0 = time.perf_counter()
    results = await asyncio.gather(*(pool.evaluate(ADD_RELU, ADD_RELU_OK + f"\n# {tag} {i}\n", opts)
                                     for i in range(n)))
    return time.perf_counter() - t0, [r.verdict for r in results]


def _cpu_row(cpu: dict[str, Any], n_jobs: int) -> dict[str, Any]:
    """CPU seconds per candidate: all of our processes, the runners (the candidate's process: its start
    and its interpreter work), and everything else (Ray, the driver, the lane actors, the judges)."""
    roles = cpu["cpu_s_by_role"]
    runner = roles.get("runner", 0.0)
    return {"cpu_s_per_candidate": round(cpu["cpu_s_total"] / n_jobs, 3),
            "runner_cpu_s_per_candidate": round(runner / n_jobs, 3),
            "other_cpu_s_per_candidate": round((cpu["cpu_s_total"] - runner) / n_jobs, 3),
            "cores_busy": cpu["cores_busy"], "cpu": cpu}


def throughput(n_jobs: int = 12) -> dict[str, Any]:
    """Candidates per hour through Ray with one lane and with two (same cluster, same jobs), with the
    machine's load and the CPU seconds each of our processes burned (benchmarks/proc_cpu.py)."""
    import ray

    from benchmarks.proc_cpu import TreeCPU, wait_quiet
    from egg_mcp.cluster.lanes import LanePool
    from egg_mcp.cluster.ray_lanes import connect
    from egg_mcp.config import EXTRA_JOB_TARGETS_VAR

    os.environ[EXTRA_JOB_TARGETS_VAR] = "tests.doubles"  # the echo job (test doubles never ship); before Ray starts
    loadavg = list(os.getloadavg())
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    rows = []
    try:
        for lanes_n in (1, 2, 1, 2):  # twice each, interleaved: the shared machine's load drifts
            pool = LanePool(connect("auto", force_interpreter=True, pythonpath=str(REPO), max_lanes=lanes_n))

            async def go():
                try:
                    await _round(pool, lanes_n, "warm")  # each lane's first job starts its engine
                    # steady state: each lane's spare judge has started and its next runner is ready, as
                    # between two candidates of a running server (the round ends with as many unused)
                    quiet = await wait_quiet()
                    before = list(os.getloadavg())
                    with TreeCPU() as cpu:
                        verify = await _round(pool, n_jobs, f"timed{lanes_n}")
                    # until each lane is back in the state the round began in (its next runner started)
                    back = await wait_quiet()
                    after = list(os.getloadavg())
                    await _device_round(pool, lanes_n, 0.1)  # each lane's first worker job starts its spares
                    dquiet = await wait_quiet()
                    with TreeCPU() as dcpu:
                        device = await _device_round(pool, n_jobs, 2.0)
                    return verify, cpu.report(), (before, after), device, dcpu.report(), (quiet, dquiet, back)
                finally:
                    await pool.aclose()

            (wall, verdicts), cpu, (before, after), (dwall, douts), dcpu, quiet = asyncio.run(go())
            cycle = wall + quiet[2]["last_busy_s"]
            rows.append({"lanes": lanes_n, "jobs": n_jobs, "wall_s": round(wall, 2),
                         "candidates_per_hour": round(n_jobs * 3600 / wall, 1), "verdicts": sorted(set(verdicts)),
                         "same_state_wall_s": round(cycle, 2), "same_state_per_hour": round(n_jobs * 3600 / cycle, 1),
                         "back_to_start_state": quiet[2],
                         "loadavg_before": before, "loadavg_after": after, "quiet_before": quiet[0],
                         **_cpu_row(cpu, n_jobs),
                         "device_bound_wall_s": round(dwall, 2), "device_bound_per_hour": round(n_jobs * 3600 / dwall, 1),
                         "device_bound_ok": sorted(set(douts)), "device_bound_cpu": dcpu,
                         "device_bound_quiet_before": quiet[1],
                         "loadavg_after_device_bound": list(os.getloadavg())})
            print({k: v for k, v in rows[-1].items() if k not in ("cpu", "device_bound_cpu")}, flush=True)
            print("  cpu s by role:", cpu["cpu_s_by_role"], flush=True)
    finally:
        ray.shutdown()

    def median(key: str, lanes_n: int) -> float:
        return round(statistics.median(r[key] for r in rows if r["lanes"] == lanes_n), 3)

    def ratio(key: str) -> tuple[float, float, float]:
        one, two = median(key, 1), median(key, 2)
        return one, two, round(two / one, 2)

    one, two, verify_ratio = ratio("candidates_per_hour")
    s1, s2, same_state_ratio = ratio("same_state_per_hour")
    d1, d2, device_ratio = ratio("device_bound_per_hour")
    cpu_cores = os.cpu_count()
    busy1 = median("cores_busy", 1)
    return {"rows": rows, "per_hour_1_lane": one, "per_hour_2_lanes": two, "ratio": verify_ratio,
            "same_state_per_hour_1_lane": s1, "same_state_per_hour_2_lanes": s2, "same_state_ratio": same_state_ratio,
            "device_bound_per_hour_1_lane": d1, "device_bound_per_hour_2_lanes": d2, "device_bound_ratio": device_ratio,
            "target": 1.5, "cpu_count": cpu_cores, "loadavg_at_start": loadavg, "loadavg_at_end": list(os.getloadavg()),
            "cpu_s_per_candidate": {"1_lane": median("cpu_s_per_candidate", 1),
                                    "2_lanes": median("cpu_s_per_candidate", 2)},
            "other_cpu_s_per_candidate": {"1_lane": median("other_cpu_s_per_candidate", 1),
                                          "2_lanes": median("other_cpu_s_per_candidate", 2)},
            "cores_busy": {"1_lane": busy1, "2_lanes": median("cores_busy", 2)},
            "ceiling": {"ratio_if_2_lanes_used_every_core": round(cpu_cores / busy1, 2) if busy1 else None,
                        "why": "one lane already keeps `cores_busy.1_lane` cores busy (its judge starts the next "
                        "candidate's runner while the current one runs); two lanes can at most fill the machine. "
                        "Meaningful on an idle machine only: under load a lane gets less than it would use"},
            "method": f"median of two interleaved runs per lane count, {n_jobs} candidates per timed round after a "
            "warm-up job per lane and a wait until no runner, judge or worker of ours is runnable (quiet_before: the "
            "engines' spares and each lane's next runner started, the steady state of a running server; "
            "cpu_s_while_waiting is what the round would otherwise have shared the CPU with). wall_s: until the last "
            "result; same_state_wall_s: until each lane is back in that state (its next runner started: the "
            "round then begins and ends alike, so a lane's ready runner at the start is paid for); ratio and "
            "same_state_ratio from each. Verify rows: real interpreter verifies (each candidate gets a fresh runner "
            "process that imports torch and triton: CPU-bound on this machine, shared with other processes: "
            "see loadavg_* and cpu_count). cpu: CPU seconds of the benchmark's whole process tree by role during "
            "the timed round (benchmarks/proc_cpu.py). Device-bound rows: worker jobs holding their lane 2 s "
            "each, as a GPU kernel would, after one short such job per lane and the same wait"}


async def lane_path_vs_plain(rounds: int = 2, sizes: dict[str, int] | None = None, device: str = "cuda",
                             correctness_trials: int = 2) -> dict[str, Any]:
    """Plain engine, NodeLane.run (the Ray node's code) and a LanePool of local lanes (serve's path), one
    after the other in each of `rounds` timed rounds, after one shared start and one warm-up round.

    Kept short for one H200 (< 2 min): the three engines start their pools at once, the warm-up round
    (compiles, loads the reference, binds each engine's persistent judge) runs the three paths side by
    side and is not timed, and each verify runs `correctness_trials` trials (the timing is the engine's
    own, unchanged)."""
    from egg_mcp.cluster import job_specs
    from egg_mcp.cluster.build import build_evaluator
    from egg_mcp.cluster.ray_lanes import NodeLane
    from egg_mcp.contract import EvalOptions
    from egg_mcp.evaluation.engine import WorkerEvaluator
    from egg_mcp.problems.builtin import builtin_source

    began = time.perf_counter()
    phases: dict[str, float] = {}
    reference = builtin_source("softmax")
    candidate = (REPO / "tests" / "adversarial" / "correct_row_softmax.py").read_text()
    opts = EvalOptions(size_overrides=sizes or {"batch_size": 4096, "dim": 8192}, device=device,
                       correctness_trials=correctness_trials)
    interp = device == "interpreter"  # a CPU smoke run of this code path (no timings)
    plain = WorkerEvaluator(scratch_dir=Path(tempfile.mkdtemp(prefix="egg-lanes-plain-")), force_interpreter=interp)
    node = NodeLane(force_interpreter=interp, model_label=None)
    pool = build_evaluator(Path(tempfile.mkdtemp(prefix="egg-lanes-pool-")), force_interpreter=interp)
    engines = [plain, node._engine(), *(getattr(ln, "evaluator", None) for ln in getattr(pool, "lanes", []))]
    engines = [ev for ev in engines if ev is not None]
    paths = {
        "plain": lambda: plain.evaluate(reference, candidate, opts),
        "ray_node_path": lambda: _node_eval(node, job_specs.evaluate_spec(reference, candidate, opts)),
        "lane_pool": lambda: pool.evaluate(reference, candidate, opts),
    }
    out: dict[str, list[dict[str, Any]]] = {k: [] for k in paths}

    def lap(name: str, since: float) -> float:
        """Add to a phase's time, and say so at once (a run killed by a time limit still shows where it was)."""
        now = time.perf_counter()
        phases[name] = round(phases.get(name, 0.0) + now - since, 2)
        print(f"lanes_gpu: {name} +{now - since:.1f} s (at {now - began:.1f} s)", flush=True)
        return now

    settle_budget = [SETTLE_BUDGET_S]

    async def settle() -> None:
        """No engine starts a spare (CUDA init) while another path's candidate is being timed. Bounded in
        all (a spare that never reports ready must not eat the run's time limit): `settle_s_left` says."""
        t0 = time.perf_counter()
        await asyncio.gather(*(ev.wait_pool_ready(timeout_s=max(0.0, settle_budget[0])) for ev in engines
                               if hasattr(ev, "wait_pool_ready")))
        settle_budget[0] -= time.perf_counter() - t0

    def row(r) -> dict[str, Any]:
        return {"verdict": r.verdict, "median_ms": r.timing.median_ms if r.timing else None,
                "cv": r.timing.cv if r.timing else None, "placement": r.placement.label() if r.placement else None,
                "summary": None if r.verdict == "correct" else (r.summary or "")[:300]}

    t = time.perf_counter()
    try:
        await asyncio.gather(*(ev.start_pool() for ev in engines))  # one shared start, all at once
        await settle()
        t = lap("start_pools", t)
        warm = await asyncio.gather(*(fn() for fn in paths.values()))  # not timed: side by side
        for name, r in zip(paths, warm):
            out[name].append(row(r))
        t = lap("warm_up_round", t)
        for _ in range(rounds):
            for name, fn in paths.items():
                await settle()
                t = lap("settle", t)
                out[name].append(row(await fn()))
                t = lap("timed_verifies", t)
    finally:
        await plain.aclose()
        await node.close()
        await pool.aclose()
        lap("close", t)
    summary = {}
    for name, rows in out.items():
        timed = [r["median_ms"] for r in rows[1:] if r["median_ms"]]
        # the warm-up round runs the three paths side by side on ONE GPU; its verdicts count too (the side_stream
        # check holds the host clock against the same calls' events, so a shared GPU no longer reads as work
        # escaping the timer); the medians are the timed rounds', run one at a time
        summary[name] = {"verdicts": sorted({r["verdict"] for r in rows}),
                         "warm_up_verdict": rows[0]["verdict"] if rows else None,
                         "median_ms": statistics.median(timed) if timed else None}
    base = summary["plain"]["median_ms"]
    for name in summary:
        m = summary[name]["median_ms"]
        summary[name]["vs_plain"] = round(m / base, 4) if m and base else None
    same = len({tuple(s["verdicts"]) for s in summary.values()}) == 1
    within = all(s["vs_plain"] is not None and abs(s["vs_plain"] - 1) <= 0.03 for s in summary.values())
    return {"rounds": out, "summary": summary, "same_verdicts": same, "within_3pct": within,
            "sizes": opts.size_overrides, "correctness_trials": correctness_trials, "timed_rounds": rounds,
            "device": device, "phases_s": phases, "wall_s": round(time.perf_counter() - began, 2),
            "settle_s_left": round(settle_budget[0], 1),
            "method": "one process, three engines (plain WorkerEvaluator; NodeLane.run, the code a Ray actor runs "
            "for a job; serve's LanePool of local lanes); pools started together, one warm-up verify per path "
            "side by side (its verdicts compared, its timings not: medians are the timed rounds'), then the paths one "
            "after the other in each timed round; medians of the timed rounds' candidate medians, vs the plain "
            "engine's"}


async def _node_eval(node, spec):
    from egg_mcp.cluster import job_specs

    return job_specs.decode(spec, await node.run(spec))
