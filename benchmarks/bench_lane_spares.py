"""One local lane, N device-bound worker jobs queued at once, with and without the pool telling the lane's
engine how many wait behind each job (`WorkerEvaluator.expect_jobs`): wall time and worker CPU.

    python3 benchmarks/bench_lane_spares.py on|off [N]     # prints one JSON line

Interpreter engine (no GPU needed); each job holds its lane 2 s in a worker (as a GPU kernel would),
so the wall time shows whether the next job's spare worker was ready when the lane came free.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


async def measure(hint: bool, n: int = 8, hold_s: float = 2.0) -> dict:
    from benchmarks.proc_cpu import TreeCPU, wait_quiet
    from egg_mcp.cluster.lanes import LanePool, local_lanes
    from egg_mcp.config import EXTRA_JOB_TARGETS_VAR

    os.environ[EXTRA_JOB_TARGETS_VAR] = "tests.doubles"  # the echo job (test doubles never ship)
    lanes = local_lanes(Path(tempfile.mkdtemp(prefix="egg-lane-spares-")), force_interpreter=True)
    if not hint:
        lanes[0].evaluator.expect_jobs = lambda n: None  # the engine as before: blind to the pool's queue
    pool = LanePool(lanes)
    try:
        await pool.run_job("tests.doubles.jobs:echo", {"sleep_s": 0.1}, timeout_s=120, uses_gpu=True)
        quiet = await wait_quiet()
        load_before = list(os.getloadavg())
        with TreeCPU() as cpu:
            t0 = time.perf_counter()
            outs = await asyncio.gather(*(pool.run_job("tests.doubles.jobs:echo", {"sleep_s": hold_s, "i": i},
                                                       timeout_s=120, uses_gpu=True) for i in range(n)))
            wall = time.perf_counter() - t0
    finally:
        await pool.aclose()
    report = cpu.report()
    return {"expect_jobs": hint, "jobs": n, "hold_s": hold_s, "wall_s": round(wall, 2), "ok": all(o.ok for o in outs),
            "loadavg_before": load_before, "loadavg_after": list(os.getloadavg()), "cpu_count": os.cpu_count(),
            "quiet_before": quiet, "cpu_s_by_role": report["cpu_s_by_role"],
            "processes_started_by_role": report["processes_started_by_role"], "cores_busy": report["cores_busy"]}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(measure(sys.argv[1] == "on", int(sys.argv[2]) if len(sys.argv) > 2 else 8))))
