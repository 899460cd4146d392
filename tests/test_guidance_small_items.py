"""Issue 18 point 5 (CPU): size_overrides refresh derived constants (or blame themselves), the attention
brief offers paradigms for every heavy op of the chain, throttled results are re-evaluated, and
commit_stage checks decision.evidence against the measured times."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from egg_mcp.analysis.reference import analyze_model
from egg_mcp.contract import STRICT_FP32
from egg_mcp.expertise.seeds import build_seed_brief
from egg_mcp.hardware import spec_for
from egg_mcp.problems.builtin import builtin_source
from egg_mcp.problems.derived import StaleDerivedConstant
from egg_mcp.problems.problem import apply_size_overrides
from egg_mcp.workflow.models import Evidence, StageDecision
from tests.test_regression_guard import FakeEvaluator, _service, src

H200 = spec_for("H200")


def _module(tmp_path, text, name):
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_size_overrides_refresh_derived_constants(tmp_path):
    ref = _module(tmp_path, "in_features = 16\nout_features = 8\nbias_shape = (out_features,)\n"
                            "scale: float = 1.0 / in_features\nunrelated = (3,)\n", "ref_derived")
    apply_size_overrides(ref, None, {"out_features": 4, "in_features": 2})
    assert ref.bias_shape == (4,) and ref.scale == 0.5 and ref.unrelated == (3,)


def test_stale_derived_constant_is_blamed_on_the_overrides(tmp_path):
    ref = _module(tmp_path, "n = 8\nname = {8: 'eight'}[n]\n", "ref_stale")
    with pytest.raises(StaleDerivedConstant, match=r"size_overrides .*`name = .*override name too.*not the candidate"):
        apply_size_overrides(ref, None, {"n": 4})


class AttentionBlock(nn.Module):
    def __init__(self, e=768, h=12):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(e, 3 * e)
        self.out = nn.Linear(e, e)

    def forward(self, x):
        b, t, e = x.shape
        q, k, v = self.qkv(x).split(e, dim=2)
        q, k, v = (z.view(b, t, self.h, e // self.h).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, e))


def test_attention_brief_offers_a_gemm_paradigm_for_the_projections():
    with torch.device("meta"):
        model, x = AttentionBlock(), torch.randn(8, 1024, 768)
    a = analyze_model(model, [x], gpu=H200, dtype="float32", tolerance=STRICT_FP32)
    brief = build_seed_brief(a, k=3, tolerance=STRICT_FP32, dtype="float32", gpu=H200)
    classes = [p.op_class for p in brief.paradigms]
    assert "attention" in classes and "gemm" in classes, classes
    gemm = next(p for p in brief.paradigms if p.op_class == "gemm")
    assert "% of the FLOPs" in gemm.why_here


class ThrottledOnce(FakeEvaluator):
    """The first timing of a tag reports a throttled GPU; later ones are clean."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.calls = 0

    async def evaluate(self, reference_source, candidate_source, options, progress=None):
        result = await super().evaluate(reference_source, candidate_source, options, progress)
        self.calls += 1
        if self.calls == 1 and result.timing is not None:
            result.timing.throttled, result.timing.throttle_reasons = True, ["sw_thermal"]
        return result


def test_a_throttled_result_is_re_evaluated_not_returned_from_the_cache(tmp_path):
    service, _ = _service(tmp_path, {"a": ("correct", 1.0, 0.0)})
    fake = ThrottledOnce({"a": ("correct", 1.0, 0.0)})
    service.evaluator = fake

    async def scenario():
        task = await service.start_task(builtin_source("softmax"))
        first = await service.verify(task.task_id, src("a"))
        second = await service.verify(task.task_id, src("a"))
        third = await service.verify(task.task_id, src("a"))
        return first, second, third

    first, second, third = asyncio.run(scenario())
    assert first.result.timing.throttled and not second.cached and fake.calls == 2
    assert third.cached and third.candidate_id == second.candidate_id  # a clean result is reused


def test_commit_evidence_that_contradicts_the_measured_time_is_flagged(tmp_path):
    service, _ = _service(tmp_path, {"a": ("correct", 1.0, 0.0)})

    async def scenario():
        task = await service.start_task(builtin_source("softmax"))
        v = await service.verify(task.task_id, src("a"))
        wrong = StageDecision(summary="fast", rationale="r", evidence=[Evidence(metric="median_ms", after=0.5)])
        return await service.commit_stage(task.task_id, v.candidate_id, wrong)

    done = asyncio.run(scenario())
    assert any("evidence" in w and "0.5" in w and "1 ms" in w for w in done.warnings), done.warnings
