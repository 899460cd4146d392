"""The lane path on a real GPU: what a Ray node runs for a job (`NodeLane.run`: the job as data through
`jobs.execute` on the node's engine) and serve's `LanePool` give the plain engine's verdicts and timings.

Run: python -m pytest tests/gpu/test_lanes_gpu.py -q -m gpu -s   (~1-2 min on one H200)
Ray itself is not needed here: the Ray-specific part (actors, transport, a killed worker) is tested in
CI on a local Ray cluster (tests/test_cluster_ray.py).
"""

from __future__ import annotations

import asyncio
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
    print(result["summary"])
    assert result["same_verdicts"], result["summary"]
    assert all(s["verdicts"] == ["correct"] for s in result["summary"].values())
    assert result["within_3pct"], result["summary"]
    pool_rows = result["rounds"]["lane_pool"]
    assert all(r["placement"] and "via local lane local/gpu0" in r["placement"] for r in pool_rows)
