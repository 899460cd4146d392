"""Output comparison and mismatch reports (runs in the worker; pure functions of tensors).

The report is written for the Debug role: where the wrong elements are and what pattern they
form (unwritten output, last partial tile, row ends, constant factor) says more than one number.
"""

from __future__ import annotations

import math

import torch

from egg_mcp.evaluation.api import MismatchReport

MAX_BAD_INDICES = 8
TILE_SIZES = (1024, 512, 256, 128, 64, 32, 16, 8)


def structure_mismatch(got, expected) -> MismatchReport | None:
    """Output count/type problems before any value is looked at."""
    got_list = list(got) if isinstance(got, (tuple, list)) else [got]
    exp_list = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    if len(got_list) != len(exp_list):
        return MismatchReport(hint=f"the candidate returned {len(got_list)} output(s), the reference {len(exp_list)}; "
                              "return the same structure as Model.forward")
    for i, (g, e) in enumerate(zip(got_list, exp_list)):
        if isinstance(e, torch.Tensor) and not isinstance(g, torch.Tensor):
            return MismatchReport(output_index=i, hint=f"output {i} is a {type(g).__name__}, expected a tensor")
    return None


def compare_tensor(got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float,
                   output_index: int = 0) -> MismatchReport | None:
    """None when `got` matches `expected` (shape, dtype, device type, layout, values); else a report."""
    base = dict(
        output_index=output_index,
        expected_shape=list(expected.shape),
        got_shape=list(got.shape),
        expected_dtype=str(expected.dtype).replace("torch.", ""),
        got_dtype=str(got.dtype).replace("torch.", ""),
    )
    if got.shape != expected.shape:
        hint = f"shape {list(got.shape)} instead of {list(expected.shape)}"
        if got.numel() == expected.numel():
            hint += " (same element count: a missing reshape/view?)"
        return MismatchReport(**base, hint=hint)
    if got.dtype != expected.dtype:
        return MismatchReport(**base, hint=f"dtype {base['got_dtype']} instead of {base['expected_dtype']}: "
                              "allocate the output with the input's dtype (or cast before returning)")
    if got.device.type != expected.device.type:
        return MismatchReport(**base, hint=f"output on {got.device} instead of {expected.device}")
    if expected.is_contiguous() and not got.is_contiguous() and got.numel() > 1:
        return MismatchReport(**base, hint=f"values may be right but the layout is not: strides {list(got.stride())} "
                              f"instead of contiguous {list(expected.stride())}; return a contiguous tensor")
    if got.numel() == 0:
        return None
    g = got.detach().to(torch.float64 if got.dtype == torch.float64 else torch.float32)
    e = expected.detach().to(g.dtype)
    g_finite = torch.isfinite(g)
    e_finite = torch.isfinite(e)
    # Non-finite output passes only where the reference has the identical non-finite value.
    same_nonfinite = (~g_finite) & (~e_finite) & ((g == e) | (torch.isnan(g) & torch.isnan(e)))
    abs_err = torch.where(g_finite & e_finite, (g - e).abs(), torch.zeros_like(g))
    bad = (abs_err > atol + rtol * e.abs()) | ((~g_finite | ~e_finite) & ~same_nonfinite)
    n_bad = int(bad.sum())
    if n_bad == 0:
        return None
    nonfinite = int((~g_finite & ~same_nonfinite).sum())
    finite_both = g_finite & e_finite
    rel_err = abs_err / e.abs().clamp_min(1e-12)
    n = g.numel()
    bad_idx = torch.nonzero(bad)[:MAX_BAD_INDICES].tolist()
    report = MismatchReport(
        **base,
        max_abs_error=_finite_or_none(abs_err.max()) if bool(finite_both.any()) else None,
        mean_abs_error=_finite_or_none(abs_err[finite_both].mean()) if bool(finite_both.any()) else None,
        max_rel_error=_finite_or_none(rel_err[finite_both].max()) if bool(finite_both.any()) else None,
        fraction_mismatched=n_bad / n,
        nonfinite_count=nonfinite,
        first_bad_indices=bad_idx,
    )
    report.hint = _nonfinite_prefix(g, e, same_nonfinite) + mismatch_hint(g, e, bad, nonfinite, atol, rtol)
    return report


def _nonfinite_prefix(g: torch.Tensor, e: torch.Tensor, same_nonfinite: torch.Tensor) -> str:
    """NaN/Inf counts first: the max error is taken over finite elements only, so '4.8e-07' beside 16 NaN
    outputs would read as a rounding problem."""
    wrong = ~same_nonfinite
    nan = int((torch.isnan(g) & wrong).sum())
    inf = int((torch.isinf(g) & wrong).sum())
    ref = int((~torch.isfinite(e) & torch.isfinite(g)).sum())
    parts = [f"{n} {what}" for n, what in ((nan, "NaN"), (inf, "Inf")) if n]
    if ref:
        parts.append(f"{ref} finite where the reference is NaN/Inf")
    if not parts or nan == g.numel():
        return ""
    return f"{' and '.join(parts)} of {g.numel()} output elements (max abs error counts finite elements only); "


def _finite_or_none(value: torch.Tensor) -> float | None:
    v = float(value)
    return v if math.isfinite(v) else None


def mismatch_hint(g: torch.Tensor, e: torch.Tensor, bad: torch.Tensor, nonfinite: int,
                  atol: float, rtol: float) -> str:
    """A sentence naming the pattern of the wrong elements, most specific first."""
    n = g.numel()
    n_bad = int(bad.sum())
    nan_count = int(torch.isnan(g).sum())
    if nan_count == n:
        return ("every element is NaN: the returned buffer was never written (the harness poisons fresh "
                "allocations with NaN) — check that the kernel stores into the tensor you return")
    where = _location_hint(bad)
    if nan_count and nan_count >= n_bad * 0.9:
        return (f"{nan_count} of {n} elements are NaN, i.e. never written (poisoned allocation)"
                + (f"; {where}" if where else ": part of the output is not covered by the grid/mask"))
    if nonfinite and nonfinite >= n_bad * 0.9:
        return f"{nonfinite} non-finite values (overflow or division by zero?)" + (f"; {where}" if where else "")
    factor = _constant_factor(g, e, atol, rtol)
    if factor is not None:
        return (f"everything is off by a constant factor of about {factor:.6g}: a missing or extra "
                "normalisation/scale (e.g. divide by the sum, 1/sqrt(d), a mean vs sum)")
    offset = _constant_offset(g, e, atol, rtol)
    if offset is not None:
        return f"everything is off by a constant offset of about {offset:.6g}: a missing or extra bias/shift"
    if where:
        return where
    if n_bad / n > 0.5:
        rel = ((g - e).abs() / e.abs().clamp_min(1e-12)).median()
        if float(rel) < 20 * max(rtol, 1e-6):
            return ("small differences almost everywhere: accumulate in fp32, keep the reference's order of "
                    "operations, or ask for a looser tolerance if the problem allows it")
        return "most elements are wrong: check the indexing (strides, row/column order) and the formula"
    return f"{n_bad} scattered elements are wrong ({n_bad / n:.2%}); check masks and reductions"


def _location_hint(bad: torch.Tensor) -> str:
    """Name a boundary when the wrong elements sit only at the end of one dimension."""
    if bad.dim() == 0:
        return ""
    for dim in range(bad.dim() - 1, -1, -1):
        size = bad.shape[dim]
        if size < 2:
            continue
        other = [d for d in range(bad.dim()) if d != dim]
        along = bad.any(dim=tuple(other)) if other else bad
        idx = torch.nonzero(along).flatten()
        if idx.numel() == 0 or idx.numel() == size:
            continue
        lo, hi = int(idx.min()), int(idx.max())
        if hi == size - 1 and idx.numel() == size - lo:
            for tile in TILE_SIZES:
                if tile < size and lo == (size // tile) * tile and size % tile:
                    return (f"only the last partial tile along dim {dim} is wrong (indices {lo}..{size - 1} of "
                            f"{size}, tile {tile}): mask the tail (offs < n) and round the grid up with cdiv")
            return (f"only indices {lo}..{size - 1} along dim {dim} (of {size}) are wrong: the grid or a loop "
                    "stops early, or the tail is not masked")
        if lo == 0 and idx.numel() == hi + 1:
            return f"only indices 0..{hi} along dim {dim} (of {size}) are wrong: the start offset or first tile"
        ends = set(idx.tolist())
        if ends <= {0, size - 1}:
            return f"only the ends (index 0 and/or {size - 1}) along dim {dim} are wrong: boundary handling"
    return ""


def _constant_factor(g: torch.Tensor, e: torch.Tensor, atol: float, rtol: float) -> float | None:
    mask = torch.isfinite(g) & torch.isfinite(e) & (e.abs() > max(atol, 1e-6) * 10)
    if int(mask.sum()) < 4:
        return None
    ratio = g[mask] / e[mask]
    r = float(ratio.median())
    if not math.isfinite(r) or abs(r - 1.0) < 10 * rtol or abs(r) < 1e-12:
        return None
    if bool(((g - r * e).abs() <= 10 * (atol + rtol * (r * e).abs())).float().mean() > 0.99):
        return r
    return None


def _constant_offset(g: torch.Tensor, e: torch.Tensor, atol: float, rtol: float) -> float | None:
    mask = torch.isfinite(g) & torch.isfinite(e)
    if int(mask.sum()) < 4:
        return None
    diff = (g - e)[mask]
    d = float(diff.median())
    if abs(d) <= 10 * atol:
        return None
    if bool(((diff - d).abs() <= 10 * (atol + rtol * e[mask].abs())).float().mean() > 0.99):
        return d
    return None
