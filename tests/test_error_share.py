"""A correct verify says how close it came to the tolerance (issue 30: `mismatch: null` read as if the error were
nil): the worst |got - e| / (atol + rtol*|e|) over the trials, max and p99, in the result and in its text."""

from __future__ import annotations

import torch

from egg_mcp.evaluation.compare import compare_outputs


def test_shares_are_the_error_over_the_tolerance_per_output():
    e = torch.linspace(-1, 1, 10_000)
    g = e + 0.5e-4  # half of atol everywhere, plus the rtol part of the limit
    shares: dict = {}
    assert compare_outputs({"y": g, "z": e.clone()}, {"y": e, "z": e}, 1e-4, 1e-4, shares=shares) is None
    y_max, y_p99 = shares["output['y']"]
    assert 0.49 < y_max <= 0.5 + 1e-3 and 0.25 < y_p99 <= y_max  # 0.5e-4 / (1e-4 + 1e-4 * |e|)
    assert shares["output['z']"] == (0.0, 0.0)
    worse = e + 0.99e-4 * (e.abs() < 0.01)
    shares = {}
    assert compare_outputs(worse, e, 1e-4, 1e-4, shares=shares) is None
    assert shares["output"][0] > 0.97 and shares["output"][1] == 0.0  # a few elements near the limit: max, not p99


def test_a_mismatch_records_no_share():
    e = torch.ones(100)
    shares: dict = {}
    assert compare_outputs(e * 2, e, 1e-4, 1e-4, shares=shares) is not None
    assert shares == {}
