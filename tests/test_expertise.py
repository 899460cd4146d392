"""Seed paradigms and the seed brief (pure, CPU, quick)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from egg_mcp.analysis.analysis_types import OP_CLASSES
from egg_mcp.analysis.reference import analyze_model
from egg_mcp.contract import LOOSE, STRICT_FP32, STRICT_HALF, BaselineResult, TimingStats
from egg_mcp.expertise.paradigms import FUSION_SCOPES, PARADIGMS, paradigms_for
from egg_mcp.expertise.seeds import build_seed_brief
from egg_mcp.hardware import spec_for

H200 = spec_for("H200")


def analyze(model, *shapes, dtype="float32", tolerance=None):
    torch_dtype = getattr(torch, dtype)
    with torch.device("meta"):
        model = model.to(device="meta", dtype=torch_dtype)
        inputs = [torch.randn(*s, dtype=torch_dtype) for s in shapes]
    return analyze_model(model, inputs, gpu=H200, dtype=dtype, tolerance=tolerance)


class LinearRelu(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.linear = nn.Linear(i, o)

    def forward(self, x):
        return torch.relu(self.linear(x))


def test_catalogue_covers_every_op_class_with_distinct_structures():
    assert set(PARADIGMS) == set(OP_CLASSES)
    for cls, paradigms in PARADIGMS.items():
        assert len(paradigms) >= 3, cls
        assert len({p.key for p in paradigms}) == len(paradigms)
        assert len({p.structure for p in paradigms}) == len(paradigms)
        for p in paradigms:
            assert p.op_class == cls and p.key.startswith(cls + ".")
            assert p.structure and p.wins_when and p.risks and p.triton_hints
    with pytest.raises(KeyError, match="known"):
        paradigms_for("fft")


def test_required_paradigms_present():
    names = {cls: " ".join(p.name for p in ps) for cls, ps in PARADIGMS.items()}
    assert "split-K" in names["gemm"] and "persistent" in names["gemm"] and "grouped" in names["gemm"]
    assert "online" in names["softmax"] and "registers" in names["softmax"]
    assert "atomic" in names["reduction"] and "second pass" in names["reduction"]
    assert "implicit GEMM" in names["convolution"] and "direct" in names["convolution"]
    assert "online softmax" in names["attention"]
    assert "carry" in names["scan"] and "associative_scan" in names["scan"]


def test_gemm_seed_brief_picks_k_distinct_gemm_structures_and_names_fusion():
    a = analyze(LinearRelu(4096, 4096), (4096, 4096))
    brief = build_seed_brief(a, k=3, tolerance=STRICT_FP32, dtype="float32", gpu=H200)
    assert len(brief.paradigms) == 3
    assert len({p.name for p in brief.paradigms}) == 3
    assert all(p.op_class == "gemm" for p in brief.paradigms)
    assert any("addmm -> relu" in f for f in brief.fusion_opportunities)
    notes = "\n".join(brief.precision_notes)
    # issue 18: 3xTF32 passes 1e-4 on this task's own K (measured error), and so does the compensated fp16 split,
    # faster on the H200 (fp16 / 3): the brief names it with its recipe and says what it buys
    assert "tf32x3: PASSES" in notes and "fp16x3: PASSES" in notes and "tf32: fails" in notes
    assert "Use fp16x3: " in notes and "a_lo = (a - a_hi.to(tl.float32)).to(tl.float16)" in notes
    assert "little headroom" not in notes and "gains come from fusion" not in notes
    assert "runs dots at" in notes and "TFLOP/s, derived lead" in notes
    assert brief.floor.compute_type == "fp16x3"
    md = brief.brief_markdown
    assert "ModelNew" in md and "atol=1e-4" in md and "addmm -> relu" in md
    assert len(md) < 6500  # (5971 before the ladder grew the fp16x3 / bf16x3 rungs and fp16x3's recipe)


def test_small_mn_large_k_ranks_split_k_first():
    a = analyze(LinearRelu(65536, 64), (64, 65536))  # 1 tile of 128x128, K=65536
    brief = build_seed_brief(a, k=2, tolerance=STRICT_FP32, dtype="float32", gpu=H200)
    assert brief.paradigms[0].name.startswith("split-K")


def test_loose_policy_allows_tf32_and_quotes_headroom():
    a = analyze(LinearRelu(4096, 4096), (4096, 4096))
    brief = build_seed_brief(a, k=3, tolerance=LOOSE, dtype="float32", gpu=H200)
    assert brief.floor.compute_type in ("tf32", "fp16", "bf16")  # the fastest path that passes 1e-2
    assert brief.floor.floor_ms < a.floor.floor_ms  # the analysis floor was strict (3xTF32)
    assert any("runs dots at" in n for n in brief.precision_notes)


def test_softmax_short_rows_vs_few_long_rows():
    many = build_seed_brief(analyze(nn.Softmax(dim=1), (4096, 1024)), k=3, tolerance=STRICT_FP32,
                            dtype="float32", gpu=H200)
    assert many.paradigms[0].name.startswith("row in registers")
    few = build_seed_brief(analyze(nn.Softmax(dim=1), (16, 1_000_000)), k=3, tolerance=STRICT_FP32,
                           dtype="float32", gpu=H200)
    assert few.paradigms[0].name.startswith("split row")
    assert len({p.name for p in few.paradigms}) == 3


def test_k_larger_than_catalogue_is_explained_not_padded_with_duplicates():
    brief = build_seed_brief(analyze(nn.Softmax(dim=1), (64, 512)), k=5, tolerance=STRICT_FP32,
                             dtype="float32", gpu=H200)
    assert len({p.name for p in brief.paradigms}) == len(brief.paradigms) == len(PARADIGMS["softmax"])
    assert any("structurally distinct" in j for j in brief.judging)


def test_chain_with_secondary_class_fills_with_fusion_scopes_or_secondary_paradigms():
    class ConvBnRelu(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(16, 32, 3)
            self.bn = nn.BatchNorm2d(32)

        def forward(self, x):
            return torch.relu(self.bn(self.conv(x)))

    brief = build_seed_brief(analyze(ConvBnRelu(), (8, 16, 64, 64)), k=5, tolerance=STRICT_FP32,
                             dtype="float32", gpu=H200)
    classes = [p.op_class for p in brief.paradigms]
    assert classes[:3] == ["convolution"] * 3
    assert "normalization" in classes  # training-mode BatchNorm needs its own statistics structure
    assert len({p.name for p in brief.paradigms}) == 5
    assert brief.paradigms[0].name.startswith("implicit GEMM")


def test_depthwise_conv_prefers_direct():
    a = analyze(nn.Conv2d(64, 64, 3, groups=64), (8, 64, 56, 56))
    brief = build_seed_brief(a, k=3, tolerance=STRICT_FP32, dtype="float32", gpu=H200)
    assert brief.paradigms[0].name.startswith("direct")


def test_half_precision_notes_and_baselines_in_judging():
    a = analyze(nn.LayerNorm(1024), (4096, 1024), dtype="bfloat16")
    base = BaselineResult(eager=TimingStats(median_ms=0.05), compiled=TimingStats(median_ms=0.03))
    brief = build_seed_brief(a, k=2, tolerance=STRICT_HALF, dtype="bfloat16", gpu=H200, baselines=base)
    assert brief.floor.compute_type == "bf16"
    assert any("accumulate in fp32" in n for n in brief.precision_notes)
    assert any("50 us" in j and "30 us" in j for j in brief.judging)
    assert "Eager 50 us" in brief.brief_markdown
    assert all(p.op_class == "normalization" for p in brief.paradigms)


def test_fusion_scopes_are_distinct():
    assert len({p.name for p in FUSION_SCOPES}) == len(FUSION_SCOPES) >= 2


def test_small_row_problems_do_not_split_rows_and_instance_norm_uses_rows():
    small = build_seed_brief(analyze(nn.LogSoftmax(dim=-1), (32, 1000)), k=3, tolerance=STRICT_FP32,
                             dtype="float32", gpu=H200)
    assert small.paradigms[0].name.startswith("row in registers")
    inst = build_seed_brief(analyze(nn.InstanceNorm2d(8), (2, 8, 16, 16)), k=3, tolerance=STRICT_FP32,
                            dtype="float32", gpu=H200)
    assert inst.paradigms[0].name.startswith("row in registers")
    bn = build_seed_brief(analyze(nn.BatchNorm2d(8), (32, 8, 64, 64)), k=3, tolerance=STRICT_FP32,
                          dtype="float32", gpu=H200)
    assert bn.paradigms[0].name.startswith("per-channel statistics")
