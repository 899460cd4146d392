"""propose_tiling never changes what a kernel computes (issue 30): a keyword passed as different literals at
several launch sites (a PHASE selecting what each launch does) is not a tunable, and apply_config refuses to set
it, where it used to set every site to one value and a wrong kernel was verified on one GPU and committed."""

from __future__ import annotations

import pytest

from egg_mcp.tiling.rewrite import apply_config
from egg_mcp.tiling.space import extract_space

PHASED = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def step(x_ptr, y_ptr, n, PHASE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if PHASE == 0:
        y = x + 1
    elif PHASE == 1:
        y = x * 2
    else:
        y = x - 3
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        a, b, c = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 256),)
        step[grid](x, a, n, PHASE=0, BLOCK=256)
        step[grid](a, b, n, PHASE=1, BLOCK=256)
        step[grid](b, c, n, PHASE=2, BLOCK=256)
        return c
'''


def test_a_keyword_with_different_literals_per_launch_is_not_tunable():
    space = extract_space(PHASED, kind="elementwise", dims={"n": 4096})
    names = {p.name for p in space.params}
    assert "PHASE" not in names and "BLOCK" in names
    assert any("PHASE is passed as different literals" in w and "not tuned" in w for w in space.warnings)


def test_apply_config_refuses_to_set_it_and_still_sets_the_shared_block():
    with pytest.raises(ValueError, match="PHASE: passed as different literals"):
        apply_config(PHASED, {"PHASE": 1})
    out = apply_config(PHASED, {"BLOCK": 512})
    assert out.count("BLOCK=512") == 3 and "PHASE=0" in out and "PHASE=1" in out and "PHASE=2" in out


def test_predictions_below_the_tasks_floor_are_flagged():
    from types import SimpleNamespace

    from egg_mcp.analysis.analysis_types import RooflineFloor
    from egg_mcp.workflow.profile_tiling import below_floor_warning

    row = lambda ms, cfg: SimpleNamespace(predicted_ms=ms, config=SimpleNamespace(values=cfg))  # noqa: E731
    proposal = SimpleNamespace(dims={"n_rows": 1, "n_cols": 393216},
                               ranked=[row(0.327, {"BLOCK": 1024}), row(3.4, {"BLOCK": 2048}), row(None,
                                                                                                   {"BLOCK": 64})])
    def floor(ms):
        return RooflineFloor(gpu_name="NVIDIA H200", compute_type="fp32", floor_ms=ms, bound="memory",
                             compute_ms=0.0, memory_ms=ms, spec_source="datasheet: DRAM 4.3 TB/s (datasheet lead)")

    text = below_floor_warning(proposal, floor(3.0))
    assert text is not None
    assert "1 config(s) below the task's floor 3 ms" in text and "0.327" in text and "'n_rows': 1" in text
    assert "datasheet lead" in text  # the floor says where its ceilings come from
    assert below_floor_warning(proposal, floor(0.1)) is None
    assert below_floor_warning(proposal, None) is None
