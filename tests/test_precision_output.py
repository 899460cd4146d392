"""Precision at the output (issue 30, item 1): each compute path judged by running the whole reference with its
emulated products and comparing at the outputs with the task's tolerance, against the per-GEMM sample (CPU)."""

from __future__ import annotations

import pytest
import torch

from egg_mcp.analysis.analysis_types import ReferenceAnalysis
from egg_mcp.analysis.precision import SAFETY, PathError, measure_path_errors, precision_ladder
from egg_mcp.analysis.precision_output import FRONTIER_MAX, _frontier
from egg_mcp.analysis.reference import analyze_job
from egg_mcp.contract import TolerancePolicy
from egg_mcp.expertise.seeds import build_seed_brief
from egg_mcp.hardware import spec_for
from egg_mcp.problems.builtin import builtin_source

H200 = spec_for("H200")

LINEAR_THEN = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """{doc}"""
    def __init__(self, k, n):
        super().__init__()
        self.linear = nn.Linear(k, n, bias=False)

    def forward(self, x):
        return {expr}

batch_size = {batch}
k = 1024
n = {n}

def get_inputs():
    return [torch.randn(batch_size, k)]

def get_init_inputs():
    return [k, n]
'''
EXP = LINEAR_THEN.format(doc="exp(8 * x W^T): the exponent scales the GEMM's relative error by 8", batch=64, n=64,
                         expr="torch.exp(8.0 * self.linear(x))")
SOFTMAX = LINEAR_THEN.format(doc="softmax over 8192 GEMM outputs: each probability ~1/8192 shrinks the error with it",
                             batch=16, n=8192, expr="torch.softmax(self.linear(x), dim=-1)")
MEAN = LINEAR_THEN.format(doc="the mean of 8192 GEMM outputs: independent errors average out", batch=16, n=8192,
                          expr="self.linear(x).mean(dim=-1)")


def _analysis(source: str, tol: float, dtype: str = "float32", sizes: dict | None = None) -> ReferenceAnalysis:
    return ReferenceAnalysis.model_validate(analyze_job({
        "reference_source": source, "dtype": dtype, "tolerance": {"name": "custom", "atol": tol, "rtol": tol},
        "size_overrides": sizes or {}}))


def _ladders(source: str, tol: float):
    """The ladder at the output (what the analysis now holds) and the per-GEMM one on the same traced GEMMs."""
    a = _analysis(source, tol)
    assert all(e.at == "output" for e in a.precision_errors) and a.precision_method.startswith("judged at the output")
    out = precision_ladder(a.precision_errors, "float32", tol, tol, H200)
    gemm = precision_ladder(measure_path_errors(a.ops, "float32"), "float32", tol, tol, H200)
    return {r.path: r for r in out.rungs}, {r.path: r for r in gemm.rungs}, a


def test_an_exponent_after_the_gemm_refuses_tf32_that_the_gemm_alone_admits():
    out, gemm, _ = _ladders(EXP, 1e-2)
    assert gemm["tf32"].admissible and gemm["fp16"].admissible  # each GEMM alone: a few % of atol
    assert not out["tf32"].admissible and out["tf32"].share_max > 4 / SAFETY  # exp(8y): 8x the relative error
    assert not out["fp16"].admissible and out["fp16"].share_max > 1 / SAFETY
    assert out["tf32x3"].admissible and out["tf32x3"].share_max < 0.01
    tf32 = out["tf32"]
    assert tf32.share_p99 is not None and tf32.share_max is not None
    assert tf32.share_p99 <= tf32.share_max


NORM = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    """layer_norm(x W^T) with nearly equal columns: the norm divides the GEMM's error by the rows' tiny spread."""
    def __init__(self, k, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(1, k).repeat(n, 1) / k ** 0.5 + 1e-3 * torch.randn(n, k) / k ** 0.5)

    def forward(self, x):
        return F.layer_norm(x @ self.w.t(), (self.w.shape[0],))

batch_size = 64
k = 1024
n = 64

def get_inputs():
    return [torch.randn(batch_size, k)]

def get_init_inputs():
    return [k, n]
'''


def test_a_normalisation_of_nearly_equal_outputs_refuses_what_the_gemm_admits_and_says_when_even_fp32_is_tight():
    out, gemm, _ = _ladders(NORM, 1e-2)
    for path in ("tf32", "fp16"):  # the GEMM alone: a few % of atol; normalised: many times the tolerance
        assert gemm[path].admissible and not out[path].admissible and out[path].share_max > 4
    assert out["tf32x3"].admissible and out["fp32"].share_max < 0.1
    out, _, a = _ladders(NORM, 1e-4)
    assert out["fp32"].share_max > 1 / SAFETY and out["fp32"].admissible  # the task's own path stays admissible
    assert out["fp32"].why.startswith("the task's own precision, over the limit: share max")
    ladder = precision_ladder(a.precision_errors, "float32", 1e-4, 1e-4, H200)
    assert ladder.fastest == "fp32" and "even fp32 exceeds the limit at the output" in ladder.note


@pytest.mark.parametrize("source", [SOFTMAX, MEAN], ids=["softmax", "mean"])
def test_a_softmax_or_mean_over_a_long_row_admits_what_the_gemm_alone_refuses(source):
    out, gemm, _ = _ladders(source, 1e-4)
    assert not gemm["tf32"].admissible and not gemm["fp16"].admissible  # K=1024 alone: >100% of atol at 1e-4
    for path in ("tf32", "fp16"):
        assert out[path].admissible and out[path].share_max < 0.1, out[path].line()
    assert not out["fp8"].admissible


def test_the_seed_brief_states_each_paths_share_at_the_output():
    a = _analysis(EXP, 1e-2)
    brief = build_seed_brief(a, k=2, tolerance=TolerancePolicy(name="custom", atol=1e-2, rtol=1e-2),
                             dtype="float32", gpu=H200)
    notes = "\n".join(brief.precision_notes)
    assert "Precision ladder (judged at the output: the whole forward on the CPU at the problem's sizes" \
           in notes and "share = |err| / (atol + rtol*|truth|) per output element" in notes
    for path in ("fp32", "tf32x3", "fp16x3", "bf16x3", "tf32", "bf16", "fp16", "fp8"):
        line = next(n for n in brief.precision_notes if n.strip().startswith(f"{path}:"))
        assert " at the output (share max " in line and ", p99 " in line and "limit 25%" in line, line
    assert "tf32: fails at the output" in notes and "fastest admissible compute path for dots is fp16x3" in notes
    assert "- Precision ladder (judged at the output" in brief.brief_markdown
    other = {r.path: r for r in precision_ladder(a.precision_errors, "float32", 1e-3, 1e-3, H200).rungs}
    why = other["tf32"].why
    assert "share max <= " in why and "(bound; measured at atol=0.01, rtol=0.01: max " in why
    assert other["tf32"].share_max >= 9.9 * out_share(a, "tf32")  # 10x tighter: ~10x the share (3-digit rounding)


def out_share(a: ReferenceAnalysis, path: str) -> float:
    return next(e for e in a.precision_errors if e.path == path).max_share(1e-2, 1e-2)


def test_batch_like_sizes_shrink_first_and_the_reduction_length_stays():
    a = _analysis(builtin_source("gemm_bias_relu"), 1e-4)  # 4096^3: over the CPU budget
    assert "at batch_size=512, out_features=512 (the problem's 4096, 4096), every reduction length as in the " \
           "problem (K 4096)" in a.precision_method
    assert {e.path: e.k for e in a.precision_errors}["tf32"] == [4096]
    ok = {e.path for e in a.precision_errors if e.max_share(1e-4, 1e-4) <= 1 / SAFETY}
    assert ok == {"fp32", "tf32x3", "fp16x3", "bf16x3"}


WIDE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """One wide linear layer: its weight alone is over the CPU budget until k shrinks."""
    def __init__(self, k):
        super().__init__()
        self.linear = nn.Linear(k, k)

    def forward(self, x):
        return self.linear(x)

batch_size = 16
k = 16384

def get_inputs():
    return [torch.randn(batch_size, k)]

def get_init_inputs():
    return [k]
'''


def test_when_the_reduction_length_must_shrink_the_method_says_so():
    a = _analysis(WIDE, 1e-4)
    assert "at k=4096 (the problem's 16384): reduction lengths shrunk too (K 4096); errors grow with K" \
           in a.precision_method
    assert all(e.at == "output" and e.k == [4096] for e in a.precision_errors)


HUGE = WIDE.replace("self.linear = nn.Linear(k, k)", "self.linear = nn.Linear(65536, 65536)").replace(
    "torch.randn(batch_size, k)", "torch.randn(batch_size, 65536)")
TBC = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    """A time-batch-channel convolution (torch.conv_tbc): one CPU kernel the emulation cannot enter."""
    def __init__(self, c):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(3, c, c) / (3 * c) ** 0.5)
        self.bias = nn.Parameter(torch.zeros(c))

    def forward(self, x):
        return torch.conv_tbc(x, self.weight, self.bias, 1)

c = 64

def get_inputs():
    return [torch.randn(32, 4, c)]

def get_init_inputs():
    return [c]
'''


@pytest.mark.parametrize("source,why", [
    (HUGE, "per GEMM, not at the output (one forward needs 1.37e+11 matmul FLOPs and 1.72e+10 B even at the "
           "problem's sizes (budget 4e+09 FLOPs, 1.5e+08 B on the CPU)): "),
    (TBC, "per GEMM, not at the output (the forward calls aten.conv_tbc, a matmul-like op the emulation does not "
          "intercept)"),
], ids=["too-large", "opaque-op"])
def test_a_forward_that_cannot_be_judged_at_the_output_falls_back_per_gemm_and_says_why(source, why):
    a = _analysis(source, 1e-4)
    assert a.precision_method.startswith(why)
    assert "): CPU emulation of each path's operand rounding" in a.precision_method
    assert a.precision_errors and all(e.at == "gemm" for e in a.precision_errors)
    ladder = precision_ladder(a.precision_errors, "float32", 1e-4, 1e-4, H200, method=a.precision_method)
    assert ladder.method.startswith("per GEMM, not at the output")
    assert not any("at the output" in line for line in ladder.lines())


def test_a_half_task_is_judged_at_the_output_in_its_own_dtype():
    a = _analysis(builtin_source("gemm_bias_relu"), 1e-2, "bfloat16",
                  {"batch_size": 64, "in_features": 512, "out_features": 64})
    assert [e.path for e in a.precision_errors] == ["bf16", "fp8"] and "other ops in bfloat16" in a.precision_method
    rungs = {r.path: r for r in precision_ladder(a.precision_errors, "bfloat16", 1e-2, 1e-2, H200).rungs}
    assert rungs["bf16"].admissible and not rungs["fp8"].admissible


def test_the_frontier_gives_the_max_share_at_any_tolerance_and_merging_only_overstates():
    gen = torch.Generator().manual_seed(1)
    ref = torch.rand(20000, generator=gen, dtype=torch.float64) * 10
    err = (torch.rand(20000, generator=gen, dtype=torch.float64) * 1e-3) * (1 + ref)  # grows with |truth|
    exact, merged = _frontier(err, ref, limit=10**9), _frontier(err, ref)
    assert len(merged) <= FRONTIER_MAX < len(exact) < 1000  # few of 20000 elements can hold the max at any tolerance

    def share(frontier, atol, rtol):
        return PathError(path="tf32", max_abs=0, max_rel=0, needed_atol=[], k=[], at="output",
                         frontier=frontier).max_share(atol, rtol)

    for atol, rtol in ((1e-4, 1e-4), (1e-2, 0.0), (1e-6, 1e-2), (1e-3, 1e-3)):
        truth = float((err / (atol + rtol * ref)).max())
        assert share(exact, atol, rtol) == pytest.approx(truth, rel=1e-12)
        assert truth <= share(merged, atol, rtol) <= 2 * truth
    assert PathError(path="x", max_abs=0, max_rel=0, needed_atol=[], k=[], at="output",
                     mismatched=3).max_share(1e-2, 1e-2) == float("inf")
