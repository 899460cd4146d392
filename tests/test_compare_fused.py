"""The fused GPU check (compare_fused) judges every element as compare_chunks.tolerance does: the same count of bad
elements, the same largest share and max |expected|, bit for bit, on edge cases (NaN, inf of either sign, overflow,
zero limits, elements exactly at the limit, half precision); and a verify's comparison through it gives the same
verdict and error shares as the torch chunks. Run on the Triton interpreter in a child process (the kernels are
built at first use; the interpreter must be on before that)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from egg_mcp.evaluation import compare, compare_chunks, compare_fused

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r'''
import json, torch
from egg_mcp.analysis import error_share
from egg_mcp.evaluation import compare, compare_chunks, compare_fused

out = {"rule": [], "max_abs": [], "verdicts": [], "self_check": compare_fused.self_check("cpu")}
for g, e, atol, rtol in compare_fused.edge_cases("cpu"):
    rule = compare_chunks.tolerance(g.float(), e, atol, rtol)
    want = [int(rule.bad.sum()), float(error_share.share(rule.abs_err, rule.limit).amax())]
    got = list(compare_fused.check(g, e, atol, rtol))
    out["rule"].append([str(g.dtype), atol, rtol, bool((g != g).any()), want, got])
gen = torch.Generator().manual_seed(1)
e = torch.randn(3 * compare_fused.BLOCK + 77, generator=gen)
for ee in (e, torch.full((5,), float("nan")), torch.tensor([float("inf"), -2.0, 1.0])):
    out["max_abs"].append([compare_chunks.max_abs_finite(ee, torch.float32), compare_fused.max_abs_finite(ee)])

# The whole comparison: chunked (chunks made small here), with the fused pass on or off.
compare_chunks.CHUNK_ELEMENTS = 1024
on_cpu = lambda g, e: g.shape == e.shape and g.dtype in compare_fused.DTYPES and e.dtype in compare_fused.DTYPES
base = torch.rand(64, 300, generator=gen)
cases = {"within": base + 1e-6, "one_bad": base.clone(), "nan": base.clone()}
cases["one_bad"][3, 7] += 1.0
cases["nan"][5, 5] = float("nan")
for name, got in cases.items():
    row = [name]
    for fused in (False, True):
        compare_fused.applies = on_cpu if fused else (lambda g, e: False)
        shares = {}
        report = compare.compare_outputs(got, base, 1e-4, 1e-4, shares=shares)
        row.append([None if report is None else report.model_dump(exclude={"trial"}), shares])
    out["verdicts"].append(row)
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def fused_vs_torch():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_element_is_judged_as_the_torch_rule_judges_it(fused_vs_torch):
    rows = fused_vs_torch["rule"]
    assert len(rows) == 32 and fused_vs_torch["self_check"] is True
    for dtype, atol, rtol, specials, want, got in rows:
        assert got == want, (dtype, atol, rtol, specials)
    # elements put on the limit land on both sides of it after rounding: the boundary itself is exercised
    assert any(0 < r[4][0] < 3 * compare_fused.BLOCK for r in rows if not r[3])
    assert any(r[4][0] == 0 for r in rows if not r[3]) and all(r[4][0] > 0 for r in rows if r[3])


def test_max_abs_over_finite_elements_matches(fused_vs_torch):
    for want, got in fused_vs_torch["max_abs"]:
        assert got == want


def test_a_verify_comparison_gives_the_same_verdict_and_shares_through_the_fused_pass(fused_vs_torch):
    by_name = {row[0]: row[1:] for row in fused_vs_torch["verdicts"]}
    assert set(by_name) == {"within", "one_bad", "nan"}
    for name, (torch_path, fused_path) in by_name.items():
        assert fused_path == torch_path, name
    assert by_name["within"][1][0] is None and by_name["within"][1][1]  # correct, with its share
    assert by_name["one_bad"][1][0]["first_bad_indices"] == [[3, 7]]


def _cpu_fused(monkeypatch, check):
    """The fused pass offered on the CPU with a stand-in kernel; its self-check result forgotten between tests."""
    monkeypatch.setattr(compare_fused, "applies", lambda g, e: True)
    monkeypatch.setattr(compare_fused, "_usable", {})
    monkeypatch.setattr(compare_fused, "max_abs_finite", lambda e: float(e.abs().max()))
    monkeypatch.setattr(compare_fused, "check", check)
    monkeypatch.setattr(compare_chunks, "CHUNK_ELEMENTS", 64)


def test_a_pass_that_disagrees_with_the_torch_rule_is_never_used(monkeypatch):
    _cpu_fused(monkeypatch, lambda g, e, atol, rtol: (0, 0.0))  # says "all within" whatever it is given
    assert compare_fused.usable(torch.device("cpu")) is False
    got, ref = torch.zeros(32, 8), torch.zeros(32, 8)
    got[3, 3] = 1.0
    report = compare.compare_outputs(got, ref, 1e-4, 1e-4)
    assert report is not None and report.first_bad_indices == [[3, 3]]


def test_a_launch_that_fails_mid_verify_leaves_the_verdict_to_the_torch_path(monkeypatch):
    def broken(g, e, atol, rtol):
        raise RuntimeError("launch failed")

    _cpu_fused(monkeypatch, broken)
    monkeypatch.setattr(compare_fused, "_usable", {"cpu": True})  # it had passed its self-check
    got, ref = torch.zeros(32, 8), torch.zeros(32, 8)
    got[1, 2] = 1.0
    report = compare.compare_outputs(got, ref, 1e-4, 1e-4)
    assert report is not None and report.first_bad_indices == [[1, 2]]
    assert compare_fused._usable == {"cpu": False}
    shares: dict = {}
    assert compare.compare_outputs(ref + 1e-6, ref, 1e-4, 1e-4, shares=shares) is None and shares


def test_it_applies_only_to_cuda_tensors_of_one_shape_judged_in_fp32():
    x = torch.zeros(4)
    assert not compare_fused.applies(x, x)  # CPU tensors keep the torch path
    assert torch.float64 not in compare_fused.DTYPES
