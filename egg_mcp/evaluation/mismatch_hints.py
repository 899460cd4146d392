"""Debug hints for a wrong output: the pattern the wrong elements form, in one sentence (compare.py builds the report).

Unwritten outputs, the last partial tile, transposed results, masked lanes padded with 0 in a max/exp reduction,
a per-row or constant factor or offset: naming the class says more to the Debug role than one number.
"""

from __future__ import annotations

import math

import torch

TILE_SIZES = (1024, 512, 256, 128, 64, 32, 16, 8)


def mismatch_hint(g: torch.Tensor, e: torch.Tensor, bad: torch.Tensor, nonfinite: int,
                  atol: float, rtol: float) -> str:
    """A sentence naming the pattern of the wrong elements, most specific first."""
    n = g.numel()
    n_bad = int(bad.sum())
    nan_count = int(torch.isnan(g).sum())
    if nan_count == n:
        return ("every element is NaN: the returned buffer was never written (the harness poisons fresh "
                "allocations with NaN) — check that the kernel stores into the tensor you return")
    where = location_hint(bad)
    if nan_count and nan_count >= n_bad * 0.9:
        return (f"{nan_count} of {n} elements are NaN, i.e. never written (poisoned allocation)"
                + (f"; {where}" if where else ": part of the output is not covered by the grid/mask"))
    if nonfinite and nonfinite >= n_bad * 0.9:
        return f"{nonfinite} non-finite values (overflow or division by zero?)" + (f"; {where}" if where else "")
    pattern = _pattern_hint(g, e, bad, atol, rtol)
    if pattern:
        return pattern
    factor = _constant_factor(g, e, atol, rtol)
    if factor is not None:
        return (f"everything is off by a constant factor of about {factor:.6g}: a missing or extra "
                "normalisation/scale (e.g. divide by the sum, 1/sqrt(d), a mean vs sum)")
    offset = _constant_offset(g, e, atol, rtol)
    if offset is not None:
        return f"everything is off by a constant offset of about {offset:.6g}: a missing or extra bias/shift"
    if where:
        return where
    rows = _rows_or_columns_hint(bad)
    if rows:
        return rows
    if n_bad / n > 0.5:
        rel = ((g - e).abs() / e.abs().clamp_min(1e-12)).median()
        if float(rel) < 20 * max(rtol, 1e-6):
            return ("small differences almost everywhere: accumulate in fp32, keep the reference's order of "
                    "operations, or ask for a looser tolerance if the problem allows it")
        return "most elements are wrong: check the indexing (strides, row/column order) and the formula"
    return f"{n_bad} scattered elements are wrong ({n_bad / n:.2%}); check masks and reductions"


MASKED_LANES_FIX = ("masked lanes of a max/exp reduction padded with 0 instead of -inf: load with "
                    "other=-float('inf') for the max (so exp() of a padded lane is 0) and other=0 for a plain sum, "
                    "or tl.where(mask, x, -float('inf')) before tl.max")


def _pattern_hint(g: torch.Tensor, e: torch.Tensor, bad: torch.Tensor, atol: float, rtol: float) -> str:
    """Classes recognised from the shape of the error (not its location): a transposed result, values
    that should be negative clamped at 0 (a max padded with 0), rows each off by their own factor."""
    for hint in (_transposed_hint(g, e, atol, rtol), _zero_padded_max_hint(g, e, bad, atol),
                 _row_factor_hint(g, e, bad, atol, rtol)):
        if hint:
            return hint
    return ""


def _close(a: torch.Tensor, b: torch.Tensor, atol: float, rtol: float) -> bool:
    return bool(((a - b).abs() <= atol + rtol * b.abs()).float().mean() > 0.99)


def _transposed_hint(g: torch.Tensor, e: torch.Tensor, atol: float, rtol: float) -> str:
    if g.dim() < 2 or min(e.shape[-2:]) < 2:
        return ""
    r, c = e.shape[-2], e.shape[-1]
    if r == c and _close(g.transpose(-1, -2), e, atol, rtol):
        return ("the output is the transpose of the expected one: rows and columns are swapped (the store uses "
                "the column index as the row, or the wrong stride for each)")
    flipped = g.reshape(*e.shape[:-2], c, r).transpose(-1, -2)
    if _close(flipped, e, atol, rtol):
        return (f"the values are the expected ones stored transposed (read as [{c}, {r}] and transposed they "
                "match): the store offsets use row and column the wrong way round (offs_n * stride_m + offs_m)")
    return ""


def _zero_padded_max_hint(g: torch.Tensor, e: torch.Tensor, bad: torch.Tensor, atol: float) -> str:
    """Wrong only where the true value is negative, and there the output is 0: a max over lanes padded with 0."""
    wrong = bad & torch.isfinite(g) & torch.isfinite(e)
    n = int(wrong.sum())
    if n < 1 or n < int(bad.sum()) * 0.9:
        return ""
    neg_true = e[wrong] < 0
    zero_got = g[wrong].abs() <= max(atol, 1e-6)
    if bool(neg_true.all()) and float(zero_got.float().mean()) > 0.9:
        right_neg = int(((e < 0) & ~bad).sum())
        return (f"{n} values whose true value is negative came out as 0 (where the true value is positive the "
                f"output is right{'' if not right_neg else ', and so are some negative ones'}): a max reduction "
                "takes 0 from padded lanes when every real value is negative (or an unwanted ReLU/clamp) — "
                + MASKED_LANES_FIX)
    return ""


def _row_factor_hint(g: torch.Tensor, e: torch.Tensor, bad: torch.Tensor, atol: float, rtol: float) -> str:
    """Each wrong row is the right row times its own factor: a per-row normaliser (sum, norm, max) is off."""
    if g.dim() < 2 or e.shape[-1] < 4:
        return ""
    g2, e2, b2 = g.reshape(-1, e.shape[-1]), e.reshape(-1, e.shape[-1]), bad.reshape(-1, e.shape[-1])
    bad_rows = b2.any(dim=1)
    if int(bad_rows.sum()) < 2 or not bool(torch.isfinite(g2[bad_rows]).all()):
        return ""
    gb, eb = g2[bad_rows], e2[bad_rows]
    usable = eb.abs() > max(atol, 1e-6) * 10
    if float(usable.float().mean()) < 0.9:
        return ""
    ratio = torch.where(usable, gb / torch.where(usable, eb, torch.ones_like(eb)), torch.nan)
    med = ratio.nanmedian(dim=1).values
    fitted = med.unsqueeze(1) * eb
    if not _close(gb, fitted, atol, rtol):
        return ""
    lo, hi = float(med.min()), float(med.max())
    uniform = abs(hi - lo) <= 1e-3 * max(abs(lo), abs(hi))
    span = f"{lo:.4g}" if uniform else f"{lo:.3g}..{hi:.3g}"
    share = f"{int(bad_rows.sum())} of {g2.shape[0]} rows"
    softmax_like = bool((e2 >= 0).all()) and bool(((e2.sum(dim=1) - 1).abs() < 1e-3).all())
    if uniform and not softmax_like:
        return ""  # one factor for everything: the constant-factor hint says it
    if softmax_like:
        sums = gb.sum(dim=1)
        if bool((sums < 1).all()):
            return (f"{share} are each scaled by their own factor ({span}) and sum to less than 1: the softmax "
                    "denominator includes terms that are not in the row — " + MASKED_LANES_FIX)
        if bool((sums > 1).all()):
            return (f"{share} are each scaled by their own factor ({span}) and sum to more than 1: the softmax "
                    "denominator misses part of the row (a loop over column blocks stops early, or the sum is "
                    "taken over one block only)")
    return (f"{share} are each off by their own factor ({span}) while every value within a row is off by the "
            "same factor: a per-row normaliser (row sum, norm, max) is computed from the wrong elements — check "
            "the reduction's mask, its padding value (0 for sums, -inf for a max) and the loop over the row")


def _rows_or_columns_hint(bad: torch.Tensor) -> str:
    """Errors that fill whole rows (or whole columns) of a 2-D view while the rest is right."""
    if bad.dim() < 2 or min(bad.shape[-2:]) < 2:
        return ""
    b2 = bad.reshape(-1, bad.shape[-1])
    rows, cols = b2.any(dim=1), b2.any(dim=0)
    n_rows, n_cols = int(rows.sum()), int(cols.sum())
    if n_rows < b2.shape[0] and float(b2[rows].float().mean()) > 0.9:
        return (f"the errors fill whole rows ({n_rows} of {b2.shape[0]}, e.g. row {int(torch.nonzero(rows)[0])}) "
                "while the other rows are right: something computed once per row is wrong for those rows (the "
                "row's offset/stride, a per-row reduction, or which program handles which row)")
    if n_cols < b2.shape[1] and float(b2[:, cols].float().mean()) > 0.9:
        return (f"the errors fill whole columns ({n_cols} of {b2.shape[1]}, e.g. column "
                f"{int(torch.nonzero(cols)[0])}) while the other columns are right: something indexed by the "
                "column is wrong there (a bias or scale vector, the column offset or its mask)")
    return ""


def location_hint(bad: torch.Tensor) -> str:
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
