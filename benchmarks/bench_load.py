"""Load: N distinct candidates submitted at once through MCP, while task_status is polled.

Reports how long every submission took, the order they finished in, whether GPU jobs overlapped
(from each result's worker timestamps is not needed: the engine serialises GPU jobs; we record
start/finish of each verify call), and task_status latency p50/p99/max while they run.

    python benchmarks/bench_load.py OUT.json [--n 50] [--interpreter] [--sizes batch_size=1024,dim=2048]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from egg_mcp.config import ServerConfig  # noqa: E402
from egg_mcp.server import create_server  # noqa: E402

SEED = (REPO / "tests" / "fixtures" / "softmax" / "row_per_program.py").read_text()


async def run(n: int, interpreter: bool, workspace: Path, sizes: dict[str, int], max_wall_s: float) -> dict:
    server = create_server(ServerConfig(workspace=workspace, force_interpreter=interpreter))
    async with Client(server, read_timeout_seconds=3600) as client:
        args = {"reference": "softmax", "k_seeds": 1}
        if sizes:
            args["size_overrides"] = sizes
        t_task = time.perf_counter()
        started = await client.call_tool("start_task", args)
        tid = started.structured_content["task_id"]
        start_task_s = time.perf_counter() - t_task
        print(f"start_task took {start_task_s:.1f} s", flush=True)
        calls: list[dict] = []
        latencies: list[float] = []
        done = anyio.Event()

        async def submit(i: int) -> None:
            source = SEED + f"\n# load variant {i}\n"  # distinct sources: no cached results
            t0 = time.perf_counter()
            r = await client.call_tool("verify", {"task_id": tid, "source": source})
            t1 = time.perf_counter()
            sc = r.structured_content or {}
            calls.append({"i": i, "submitted_s": t0, "finished_s": t1, "verdict": sc.get("verdict"),
                          "error": r.content[0].text if r.is_error else None})
            print(f"{t1 - t_start:7.1f} s  #{i:<3} {sc.get('verdict')}  ({len(calls)}/{n} done)", flush=True)

        async def poll() -> None:
            while not done.is_set():
                t0 = time.perf_counter()
                r = await client.call_tool("task_status", {"task_id": tid})
                latencies.append((time.perf_counter() - t0) * 1e3)
                assert not r.is_error
                await anyio.sleep(0.05)

        t_start = time.perf_counter()
        with anyio.move_on_after(max_wall_s) as scope:  # report what finished, not nothing
            async with anyio.create_task_group() as tg:
                tg.start_soon(poll)
                async with anyio.create_task_group() as subs:
                    for i in range(n):
                        subs.start_soon(submit, i)
                        await anyio.sleep(0)  # keep submission order = i
                done.set()
        wall = time.perf_counter() - t_start
    calls.sort(key=lambda c: c["finished_s"])
    order = [c["i"] for c in calls]
    inversions = sum(1 for a, b in zip(order, order[1:]) if a > b)
    lat = sorted(latencies)
    return {
        "n": n, "completed": len(calls), "stopped_at_max_wall": scope.cancelled_caught, "start_task_s": round(start_task_s, 2),
        "mode": "interpreter (CPU)" if interpreter else "gpu", "sizes": sizes, "wall_s": round(wall, 2),
        "verdicts": {v: sum(1 for c in calls if c["verdict"] == v) for v in {c["verdict"] for c in calls}},
        "errors": [c["error"] for c in calls if c["error"]][:5],
        "finish_order": order, "adjacent_order_inversions": inversions,
        "task_status_ms": {"n": len(lat), "p50": round(statistics.median(lat), 2) if lat else None,
                           "p99": round(lat[min(len(lat) - 1, int(0.99 * len(lat)))], 2) if lat else None,
                           "max": round(lat[-1], 2) if lat else None},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--interpreter", action="store_true")
    parser.add_argument("--sizes", default="", help="size overrides for the softmax problem, e.g. batch_size=1024,dim=2048")
    parser.add_argument("--max-wall-s", type=float, default=3600.0, help="stop waiting after this long; the JSON says how many finished")
    args = parser.parse_args()
    sizes = {k: int(v) for k, v in (item.split("=") for item in args.sizes.split(",") if item)}
    with tempfile.TemporaryDirectory() as ws:
        result = anyio.run(run, args.n, args.interpreter, Path(ws), sizes, args.max_wall_s)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "finish_order"}, indent=1))


if __name__ == "__main__":
    main()
