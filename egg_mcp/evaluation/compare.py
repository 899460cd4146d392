"""Output comparison and mismatch reports (runs in the worker; pure functions of tensors).

The report is written for the Debug role: where the wrong elements are and what pattern they
form (unwritten output, last partial tile, row ends, constant factor) says more than one number.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from egg_mcp.contract import MismatchReport
from egg_mcp.evaluation.wire import MAX_DEPTH, path_str

MAX_BAD_INDICES = 8
TILE_SIZES = (1024, 512, 256, 128, 64, 32, 16, 8)


def compare_outputs(got: Any, expected: Any, atol: float, rtol: float, *, notes: dict[str, str] | None = None,
                    to_expected_device: bool = False, shares: dict[str, tuple[float, float]] | None = None
                    ) -> MismatchReport | None:
    """Every part of `got` against `expected`, walked as a structure (tuples, lists, dicts; wire.flatten_output's
    limits): None when all match, else the report for the first bad part, with its `path` (output[1][0],
    output['h']) and `output_index` (its top-level position). Structure: tuple and list are interchangeable,
    anything else (dict vs sequence, lengths, keys, a tensor vs a scalar) is a mismatch. Tensors: shape, dtype,
    layout and values (compare_tensor: floats within atol + rtol*|expected|, complex on both parts, integer and
    bool exactly). Python scalars: bool/int/str/None exactly, float/complex with the tolerance. Where the tolerance
    would pass an all-zeros output (`vacuous_scale`), a line for the user lands in `notes` (keyed by path); for
    each floating tensor that matches, `shares` (when given) gets path -> (max, p99) of the error as a share of
    the tolerance. ValueError when `expected` itself is not such a structure (the caller's reference is at fault)."""
    walk = _Walk(expected, atol, rtol, notes, to_expected_device, values=True)
    walk.shares = shares
    return walk.walk(got, expected, [], 0)


def structure_mismatch(got: Any, expected: Any) -> MismatchReport | None:
    """Structure and leaf-kind problems only (no values compared)."""
    return _Walk(expected, 0.0, 0.0, None, False, values=False).walk(got, expected, [], 0)


def vacuous_scale(max_abs_expected: float, atol: float, rtol: float) -> bool:
    """True when |got - e| <= atol + rtol*|e| holds for got = 0 at every element: max|e| <= atol / (1 - rtol).
    Such a check says nothing about the kernel; it is replaced by the same check on the output scaled to
    max |e| = 1, i.e. atol * max|e| + rtol*|e| (an all-zeros output then fails whenever atol + rtol < 1).
    An all-zeros reference (max 0) is left alone: zeros are then the right answer."""
    return rtol < 1 and 0 < max_abs_expected <= atol / (1 - rtol)


def _effective_atol(max_abs: float, atol: float, rtol: float, path: str,
                    notes: dict[str, str] | None) -> tuple[float, bool]:
    if not vacuous_scale(max_abs, atol, rtol):
        if max_abs == 0 and notes is not None:
            notes.setdefault(path, f"{path}: the reference is all zeros on these inputs, so the check there only "
                             f"shows the kernel writes values within atol={atol:g} of zero.")
        return atol, False
    if notes is not None:
        notes.setdefault(path, (
            f"{path}: the reference's values are at most {max_abs:.3g} in magnitude, within atol/(1-rtol) = "
            f"{atol / (1 - rtol):.3g}, so the usual check would pass an all-zeros output; it was compared with atol "
            f"scaled by that maximum instead (|got-ref| <= {atol:g}*{max_abs:.3g} + {rtol:g}*|ref|)."))
    return atol * max_abs, True


def _describe(v: Any) -> str:
    from egg_mcp.evaluation.wire import Opaque

    if isinstance(v, torch.Tensor):
        return f"a tensor {list(v.shape)} {str(v.dtype).replace('torch.', '')}"
    if isinstance(v, (tuple, list)):
        return f"a {'tuple' if isinstance(v, tuple) else 'list'} of {len(v)}"
    if isinstance(v, dict):
        return f"a dict with keys {sorted(map(str, v))[:8]}"
    if v is None:
        return "None"
    if isinstance(v, Opaque):
        return f"{v.type_name} (not comparable)"
    return f"a {type(v).__name__}"


class _Walk:
    def __init__(self, top: Any, atol: float, rtol: float, notes: dict[str, str] | None, to_device: bool,
                 values: bool):
        self.top, self.atol, self.rtol, self.notes = top, atol, rtol, notes
        self.to_device, self.values = to_device, values
        self.shares: dict[str, tuple[float, float]] | None = None

    def report(self, parts: list, g: Any, e: Any, hint: str) -> MismatchReport:
        index = 0
        if parts and isinstance(parts[0], int):
            index = parts[0]
        elif parts and isinstance(self.top, dict):
            index = list(self.top).index(parts[0])
        extra = {}
        if isinstance(e, torch.Tensor):
            extra.update(expected_shape=list(e.shape), expected_dtype=str(e.dtype).replace("torch.", ""))
        if isinstance(g, torch.Tensor):
            extra.update(got_shape=list(g.shape), got_dtype=str(g.dtype).replace("torch.", ""))
        return MismatchReport(output_index=index, path=path_str(parts), hint=hint, **extra)

    def walk(self, g: Any, e: Any, parts: list, depth: int) -> MismatchReport | None:
        path = path_str(parts)
        if isinstance(e, (tuple, list, dict)) and depth >= MAX_DEPTH:
            raise ValueError(f"the reference's {path} is nested deeper than {MAX_DEPTH} levels")
        seq_e, seq_g = isinstance(e, (tuple, list)), isinstance(g, (tuple, list))
        if not parts and (seq_e or seq_g) and (seq_e != seq_g or len(g) != len(e)):
            n_g, n_e = (len(g) if seq_g else 1), (len(e) if seq_e else 1)
            return self.report(parts, g, e, f"the candidate returned {n_g} output(s) ({_describe(g)}), the reference "
                               f"{n_e} ({_describe(e)}); return the same structure as Model.forward")
        if seq_e or isinstance(e, dict):
            same_kind = seq_g if seq_e else isinstance(g, dict)
            if not same_kind or len(g) != len(e):
                return self.report(parts, g, e, f"{path} is {_describe(g)}, expected {_describe(e)}; return the same "
                                   "structure as Model.forward")
            if seq_e:
                pairs = [(i, g[i], e[i]) for i in range(len(e))]
            else:
                if not all(isinstance(k, str) for k in e):
                    raise ValueError(f"the reference's {path} is a dict with keys other than strings")
                if set(g) != set(e):
                    missing, extra = sorted(set(e) - set(g))[:5], sorted(map(str, set(g) - set(e)))[:5]
                    return self.report(parts, g, e, f"{path} has different keys than the reference: missing "
                                       f"{missing}, unexpected {extra}")
                pairs = [(k, g[k], e[k]) for k in e]
            for key, g_item, e_item in pairs:
                found = self.walk(g_item, e_item, parts + [key], depth + 1)
                if found is not None:
                    return found
            return None
        return self.leaf(g, e, parts)

    def leaf(self, g: Any, e: Any, parts: list) -> MismatchReport | None:
        path = path_str(parts)
        where = f"{path}: " if parts else ""
        if isinstance(e, torch.Tensor):
            if not isinstance(g, torch.Tensor):
                return self.report(parts, g, e, f"{path} is {_describe(g)}, expected {_describe(e)}")
            if not self.values:
                return None
            if self.to_device and g.device != e.device:
                g = g.to(e.device)
            found = compare_tensor(g, e, self.atol, self.rtol, path=path, notes=self.notes, shares=self.shares)
            if found is not None:
                base = self.report(parts, g, e, "")
                found.output_index, found.path, found.hint = base.output_index, base.path, where + found.hint
            return found
        if e is not None and not isinstance(e, (bool, int, float, complex, str)):
            raise ValueError(f"the reference's {path} is a {type(e).__name__}: only tensors, Python scalars, strings, "
                             "None and tuples/lists/dicts of them can be compared")
        def kind(v) -> str:
            return ("None" if v is None else "bool" if isinstance(v, bool) else "int" if isinstance(v, int)
                    else "float" if isinstance(v, float) else "complex" if isinstance(v, complex)
                    else "str" if isinstance(v, str) else "other")

        if kind(g) != kind(e):
            return self.report(parts, g, e, f"{path} is {_describe(g)}, expected {_describe(e)} (Python scalars "
                               "must have the reference's type)")
        if not self.values or _scalar_equal(g, e, self.atol, self.rtol, path, self.notes):
            return None
        text = lambda v: repr(v) if len(repr(v)) <= 80 else repr(v)[:77] + "..."  # noqa: E731
        how = "within atol + rtol*|expected|" if kind(e) in ("float", "complex") else "exactly"
        return self.report(parts, g, e, f"{path} is {text(g)}, expected {text(e)} (compared {how})")


def _scalar_equal(g: Any, e: Any, atol: float, rtol: float, path: str, notes: dict[str, str] | None) -> bool:
    if not isinstance(e, (float, complex)):
        return g == e
    pairs = [(complex(g).real, complex(e).real), (complex(g).imag, complex(e).imag)]
    finite = [abs(x) for _, x in pairs if math.isfinite(x)]
    eff_atol, _ = _effective_atol(max(finite, default=0.0), atol, rtol, path, notes if max(finite, default=0) else None)
    for gv, ev in pairs:
        if math.isnan(ev) or math.isnan(gv):
            if not (math.isnan(ev) and math.isnan(gv)):
                return False
        elif math.isinf(ev) or math.isinf(gv):
            if gv != ev:
                return False
        elif abs(gv - ev) > eff_atol + rtol * abs(ev):
            return False
    return True


SHARE_SAMPLE = 1 << 20
"""Elements the p99 error share is taken over (evenly spaced; the max is over every element)."""


def _error_share(abs_err: torch.Tensor, limit: torch.Tensor) -> tuple[float, float]:
    share = (abs_err / limit).reshape(-1)
    step = max(1, share.numel() // SHARE_SAMPLE)
    sample = share[::step]
    k = max(1, min(sample.numel(), math.ceil(0.99 * sample.numel())))
    return float(share.max()), float(torch.kthvalue(sample, k).values)


def compare_tensor(got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float,
                   output_index: int = 0, *, path: str = "output",
                   notes: dict[str, str] | None = None,
                   shares: dict[str, tuple[float, float]] | None = None) -> MismatchReport | None:
    """None when `got` matches `expected` (shape, dtype, device type, layout, values); else a report.
    Floating values: |got - e| <= atol + rtol*|e| (atol scaled down where it would pass zeros: vacuous_scale);
    complex: the same on the real and the imaginary parts; integer and bool: exactly."""
    base: dict[str, Any] = dict(
        output_index=output_index,
        path=path,
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
    if not (expected.is_floating_point() or expected.is_complex()):
        return _compare_exact(got.detach(), expected.detach(), base)
    is_complex = expected.is_complex()
    g, e = got.detach(), expected.detach()
    if is_complex:  # the two parts side by side: the last dimension (size 2) is (real, imag)
        g, e = torch.view_as_real(g.resolve_conj()), torch.view_as_real(e.resolve_conj())
    g = g.to(torch.float64 if g.dtype == torch.float64 else torch.float32)
    e = e.to(g.dtype)
    g_finite = torch.isfinite(g)
    e_finite = torch.isfinite(e)
    max_abs = float(torch.where(e_finite, e.abs(), 0).max()) if bool(e_finite.any()) else math.inf
    atol, scaled = _effective_atol(max_abs, atol, rtol, path, notes)
    # Non-finite output passes only where the reference has the identical non-finite value.
    same_nonfinite = (~g_finite) & (~e_finite) & ((g == e) | (torch.isnan(g) & torch.isnan(e)))
    abs_err = torch.where(g_finite & e_finite, (g - e).abs(), torch.zeros_like(g))
    bad = (abs_err > atol + rtol * e.abs()) | ((~g_finite | ~e_finite) & ~same_nonfinite)
    n_bad = int(bad.sum())
    if n_bad == 0:
        if shares is not None:
            shares[path] = _error_share(abs_err, atol + rtol * torch.where(e_finite, e.abs(), 0))
        return None
    nonfinite = int((~g_finite & ~same_nonfinite).sum())
    finite_both = g_finite & e_finite
    rel_err = abs_err / e.abs().clamp_min(1e-12)
    per_element = bad.any(dim=-1) if is_complex else bad
    bad_idx = torch.nonzero(per_element)[:MAX_BAD_INDICES].tolist()
    report = MismatchReport(
        **base,
        max_abs_error=_finite_or_none(abs_err.max()) if bool(finite_both.any()) else None,
        mean_abs_error=_finite_or_none(abs_err[finite_both].mean()) if bool(finite_both.any()) else None,
        max_rel_error=_finite_or_none(rel_err[finite_both].max()) if bool(finite_both.any()) else None,
        fraction_mismatched=int(per_element.sum()) / per_element.numel(),
        nonfinite_count=nonfinite,
        first_bad_indices=bad_idx,
    )
    part = ""
    if is_complex:
        real_bad, imag_bad = bool(bad[..., 0].any()), bool(bad[..., 1].any())
        if imag_bad and not real_bad:
            part = ("only the imaginary parts are wrong (the real parts match): is the imaginary part dropped, or the "
                    "output computed as real?")
        elif real_bad and not imag_bad:
            part = "only the real parts are wrong (the imaginary parts match)"
    report.hint = _nonfinite_prefix(g, e, same_nonfinite) + (part or mismatch_hint(g, e, bad, nonfinite, atol, rtol))
    if scaled:
        report.hint += (f" (compared with atol scaled to {atol:.3g}: the reference's values are at most "
                        f"{max_abs:.3g}, where the plain tolerance would pass an all-zeros output)")
    return report


def _compare_exact(g: torch.Tensor, e: torch.Tensor, base: dict) -> MismatchReport | None:
    """Integer and bool outputs: every element equal (no tolerance, no float rounding of large integers)."""
    bad = g != e
    n_bad = int(bad.sum())
    if n_bad == 0:
        return None
    diff = (g.to(torch.float64) - e.to(torch.float64)).abs()
    where = _location_hint(bad)
    return MismatchReport(
        **base, max_abs_error=float(diff.max()), mean_abs_error=float(diff.mean()),
        fraction_mismatched=n_bad / g.numel(),
        nonfinite_count=0, first_bad_indices=torch.nonzero(bad)[:MAX_BAD_INDICES].tolist(),
        hint=f"{n_bad} of {g.numel()} elements differ ({base['expected_dtype']} outputs are compared exactly)"
             + (f"; {where}" if where else ""))


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
