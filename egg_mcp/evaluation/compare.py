"""Output comparison and mismatch reports (runs in the worker; pure functions of tensors).

The report is written for the Debug role: where the wrong elements are and what pattern they
form (unwritten output, last partial tile, row ends, constant factor) says more than one number.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from egg_mcp.analysis import error_share
from egg_mcp.analysis.error_share import SHARE_SAMPLE
from egg_mcp.contract import MismatchReport
from egg_mcp.evaluation import compare_chunks, compare_fused
from egg_mcp.evaluation.gpu_cache import release_cached
from egg_mcp.evaluation.mismatch_hints import location_hint, mismatch_hint
from egg_mcp.evaluation.wire import MAX_DEPTH, path_str

MAX_BAD_INDICES = 8


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


def _error_share(abs_err: torch.Tensor, limit: torch.Tensor) -> tuple[float, float]:
    """(max, p99) of |err| / (atol + rtol |ref|): `analysis.error_share`, the ladder's definition too."""
    return error_share.max_and_p99(abs_err, limit, SHARE_SAMPLE)


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
    if compare_chunks.applies(got, expected):
        found = _chunked(got, expected, atol, rtol, path, notes, shares)
        if found is None:
            return None
        try:  # a mismatch: the whole-tensor report below, whose pattern hints read the whole output
            return _whole_report(got, expected, atol, rtol, base, path, notes)
        except torch.cuda.OutOfMemoryError:
            release_cached(force=True)
            return _chunked_report(found, base)
    return _whole_report(got, expected, atol, rtol, base, path, notes, shares)


def _chunked(got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float, path: str,
             notes: dict[str, str] | None, shares: dict[str, tuple[float, float]] | None
             ) -> compare_chunks.ChunkedCheck | None:
    """None when every element is within the tolerance (its share recorded), else what the chunked pass found."""
    dtype = torch.float64 if got.dtype == torch.float64 else torch.float32
    step = error_share.sample_step(expected.numel(), SHARE_SAMPLE)
    if compare_fused.applies(got, expected) and compare_fused.usable(expected.device):
        try:  # two reads of the outputs on the GPU; the torch pass below only when some element is bad
            max_abs = compare_fused.max_abs_finite(expected)
            fused_atol, _ = _effective_atol(max_abs, atol, rtol, path, notes)
            n_bad, share_max = compare_fused.check(got, expected, fused_atol, rtol)
        except Exception:  # noqa: BLE001 - a launch that fails (it passed its self-check): the torch path judges
            compare_fused.distrust(expected.device)
        else:
            if not n_bad:
                if shares is not None:
                    shares[path] = (share_max, _sample_p99(got, expected, fused_atol, rtol, step))
                return None
    max_abs = compare_chunks.max_abs_finite(expected, dtype)
    atol, _ = _effective_atol(max_abs, atol, rtol, path, notes)
    found = compare_chunks.check(got, expected, atol, rtol, step, dtype)
    if found.n_bad:
        return found
    if shares is not None:
        shares[path] = found.share()
    return None


def _sample_p99(got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float, step: int) -> float:
    """The p99 share over the evenly spaced sample compare_chunks.check keeps (every step-th element)."""
    g = got.detach().reshape(-1)[::step].float()
    e = expected.detach().reshape(-1)[::step].float()
    rule = compare_chunks.tolerance(g, e, atol, rtol)
    return error_share.p99(error_share.share(rule.abs_err, rule.limit))


def _chunked_report(found: compare_chunks.ChunkedCheck, base: dict) -> MismatchReport:
    """The report when the whole-tensor one does not fit in the judge's memory: where, not how much."""
    assert found.bad is not None
    n = found.bad.numel()
    where = location_hint(found.bad)
    return MismatchReport(
        **base, fraction_mismatched=found.n_bad / n, first_bad_indices=torch.nonzero(found.bad)[:MAX_BAD_INDICES]
        .tolist(), hint=f"{found.n_bad} of {n} elements are outside the tolerance" + (f"; {where}" if where else "")
        + " (the output is too large for the error sizes and pattern hints in the judge's free GPU memory)")


def _whole_report(got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float, base: dict, path: str,
                  notes: dict[str, str] | None, shares: dict[str, tuple[float, float]] | None = None
                  ) -> MismatchReport | None:
    """The whole-tensor check (float and complex); its report says how much, where and in what pattern."""
    is_complex = expected.is_complex()
    g, e = got.detach(), expected.detach()
    if is_complex:  # the two parts side by side: the last dimension (size 2) is (real, imag)
        g, e = torch.view_as_real(g.resolve_conj()), torch.view_as_real(e.resolve_conj())
    g = g.to(torch.float64 if g.dtype == torch.float64 else torch.float32)
    e = e.to(g.dtype)
    e_finite = torch.isfinite(e)
    max_abs = float(torch.where(e_finite, e.abs(), 0).max()) if bool(e_finite.any()) else math.inf
    atol, scaled = _effective_atol(max_abs, atol, rtol, path, notes)
    rule = compare_chunks.tolerance(g, e, atol, rtol)
    bad, abs_err, g_finite, same_nonfinite = rule.bad, rule.abs_err, rule.g_finite, rule.same_nonfinite
    n_bad = int(bad.sum())
    if n_bad == 0:
        if shares is not None:
            shares[path] = _error_share(abs_err, rule.limit)
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
    where = location_hint(bad)
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


def worst_error_share(old: dict[str, Any] | None, shares: dict[str, tuple[float, float]]) -> dict[str, Any] | None:
    """The worst error as a share of the tolerance over the trials so far, `shares` (path -> (max, p99)) being one
    more trial's: what a correct verdict reports, so 33 % of the tolerance never reads like 0.001 %."""
    if not shares:
        return old
    path, (worst, _) = max(shares.items(), key=lambda kv: kv[1][0])
    p99 = max(p for _, p in shares.values())
    if old is None or worst > old["max_share"]:
        return {"max_share": worst, "p99_share": max(p99, old["p99_share"] if old else 0.0),
                "path": path, "trials": (old["trials"] if old else 0) + 1}
    return {**old, "p99_share": max(old["p99_share"], p99), "trials": old["trials"] + 1}
