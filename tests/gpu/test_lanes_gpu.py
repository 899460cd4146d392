"""The lane path on a real GPU: what a Ray node runs for a job (`NodeLane.run`: the job as data through
`jobs.execute` on the node's engine) and serve's `LanePool` give the plain engine's verdicts and timings,
in the same run (benchmarks/bench_lanes.py: lane_path_vs_plain).

Run: EGG_MCP_RESULTS_DIR=DIR python -m pytest tests/gpu/test_lanes_gpu.py -q -m gpu -s   (< 2 min on one H200)
The measured numbers are printed as one line `LANES_GPU_RESULT {json}` and, with EGG_MCP_RESULTS_DIR set,
written to DIR/lanes_gpu_test.json (to commit with the run's log).
Ray itself is not needed here: the Ray-specific part (actors, transport, a killed worker) is tested in
CI on a local Ray cluster (tests/test_cluster_ray.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def test_lane_path_matches_the_plain_engine():
    from benchmarks.bench_lanes import lane_path_vs_plain

    result = asyncio.run(lane_path_vs_plain(rounds=2))
    line = json.dumps(result)
    print("LANES_GPU_RESULT " + line, flush=True)
    if os.environ.get("EGG_MCP_RESULTS_DIR"):
        out = Path(os.environ["EGG_MCP_RESULTS_DIR"])
        out.mkdir(parents=True, exist_ok=True)
        (out / "lanes_gpu_test.json").write_text(json.dumps(result, indent=1))
    assert result["same_verdicts"], result["summary"]
    assert all(s["verdicts"] == ["correct"] for s in result["summary"].values()), result["rounds"]
    assert result["within_3pct"], result["summary"]
    pool_rows = result["rounds"]["lane_pool"]
    assert all(r["placement"] and "via local lane local/gpu0" in r["placement"] for r in pool_rows)
    node_rows = result["rounds"]["ray_node_path"]
    assert all(r["median_ms"] for r in node_rows[1:])  # the node path timed its candidate
