"""The measuring worker on the CPU interpreter (tiny problem): correctness per config, failures
recorded, the adaptive rounds. Runs in a subprocess so TRITON_INTERPRET does not leak."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from egg_mcp.problems.builtin import builtin_source
from egg_mcp.tiling.rewrite import apply_config

REPO = Path(__file__).resolve().parents[1]

CANDIDATE = '''"""Softmax, one program per row; BLOCK must cover the row (no loop)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 128
NUM_WARPS = 4
TUNING_SPACE = {"BLOCK": [32, 64, 128, 256], "NUM_WARPS": [1, 2, 4]}


@triton.jit
def softmax_row_kernel(x_ptr, y_ptr, n_cols, x_row_stride, y_row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(y_ptr + row * y_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        softmax_row_kernel[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK=BLOCK, num_warps=NUM_WARPS)
        return y
'''


def run_worker(payload: dict, tmp_path: Path) -> dict:
    p_in, p_out = tmp_path / "payload.json", tmp_path / "result.json"
    p_in.write_text(json.dumps(payload))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "egg_mcp.tiling.measure", str(p_in), str(p_out)], env=env,
                          capture_output=True, text=True, timeout=240)
    assert p_out.exists(), proc.stderr[-3000:]
    result = json.loads(p_out.read_text())
    assert "error" not in result, result
    return result


def test_measure_configs_checks_each_config(tmp_path):
    ref = builtin_source("softmax")
    configs = [{"BLOCK": 128, "NUM_WARPS": 4}, {"BLOCK": 64, "NUM_WARPS": 2}]
    candidates = [{"config": c, "source": apply_config(CANDIDATE, c)} for c in configs]
    candidates.append({"config": {"BLOCK": 256, "NUM_WARPS": 1},
                       "source": CANDIDATE.replace("tl.arange(0, BLOCK)", "tl.arange(0, BLOCK) +")})
    result = run_worker({"reference_source": ref, "candidates": candidates, "device": "interpreter",
                         "size_overrides": {"batch_size": 3, "dim": 100}}, tmp_path)
    good, short, broken = result["results"]
    assert good["correct"] and good["median_ms"] > 0 and good["max_abs_error"] < 1e-5
    assert good["config"]["values"] == configs[0]
    assert short["correct"] is False and short["error_kind"] == "incorrect" and short["median_ms"] is None
    assert broken["correct"] is False and broken["error_kind"] in ("compile_error", "runtime_error") and broken["error"]
    assert result["device"] == "interpreter"


def test_measure_configs_adaptive_rounds(tmp_path):
    ranked = [[{"BLOCK": 128, "NUM_WARPS": 4}, 1.0], [{"BLOCK": 256, "NUM_WARPS": 4}, 2.0],
              [{"BLOCK": 64, "NUM_WARPS": 4}, 3.0], [{"BLOCK": 128, "NUM_WARPS": 2}, 4.0]]
    payload = {"reference_source": builtin_source("softmax"), "device": "interpreter",
               "size_overrides": {"batch_size": 2, "dim": 100},
               "adaptive": {"candidate_source": CANDIDATE, "ranked": ranked,
                            "choices": {"BLOCK": [32, 64, 128, 256], "NUM_WARPS": [1, 2, 4]}, "max_trials": 4}}
    result = run_worker(payload, tmp_path)
    measured = [r["config"]["values"] for r in result["results"]]
    assert len(measured) == 4 and measured[0] == {"BLOCK": 128, "NUM_WARPS": 4}
    by_block = {r["config"]["values"]["BLOCK"]: r for r in result["results"]}
    assert by_block[64]["correct"] is False  # 64 < 100 columns: the row is not covered
    assert by_block[256]["correct"] is True
