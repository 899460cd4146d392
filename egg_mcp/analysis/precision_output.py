"""Precision at the output (worker side, torch): each compute path's error where the tolerance is applied.

An error one GEMM keeps small can be amplified by what follows it (exp, a normalisation of nearly equal
values, a later GEMM) or damped (a softmax over a long row, a mean), so the error that decides a path is the
one at the problem's outputs. `measure_output_errors` runs the whole reference forward on the CPU once in
fp64 (the truth) and once per compute path with every matmul-like aten op computed from the path's rounded
operands (`precision._emulate`, the rounding the per-GEMM measurement uses), every other op in the task dtype,
and keeps per path what the ladder needs to judge any tolerance (`PathError.frontier`).

The forward runs at the problem's sizes when one forward fits FLOP_BUDGET and BYTE_BUDGET; otherwise at a
smaller size found on meta tensors: first the constants that change no reduction length (batch, output
features) are halved, which leaves each output element's error distribution as it is, then, only if still
over budget, the ones that do, the way `problems.loader.derive_quick_sizes` shrinks (related constants
together, multiples of group counts kept). The method text says which sizes were used.
"""

from __future__ import annotations

import copy
import math
from typing import Any, NamedTuple

from egg_mcp.analysis.error_share import max_and_p99
from egg_mcp.analysis.precision import SAFETY, PathError, _emulate, task_paths

FLOP_BUDGET = 4e9
"""Matmul-like FLOPs of one forward at the size the output is measured at (~16 forwards' worth run: fp64 and each
path, the three split paths three products each)."""
BYTE_BUDGET = 1.5e8
"""Bytes one eager forward reads and writes at that size (activations, parameters; the fp64 copy doubles them)."""
FRONTIER_MAX = 16
"""(|err|, |truth|) pairs kept per path; more are merged conservatively (largest err with smallest truth). They
travel in the analysis to the client, so few, and written with 3 significant digits rounded outward (`_round`)."""

_TC = ("gemm", "batched_gemm", "convolution", "attention")


class OutputProbeError(RuntimeError):
    """The whole forward cannot be judged at the output here; the message says why (the ladder falls back)."""


class _Cost(NamedTuple):
    flops: float
    bytes: float
    lengths: tuple[int, ...]
    ks: list[int]


def _lengths(ops: list[Any]) -> tuple[tuple[int, ...], list[int]]:
    """Every reduction length of the forward (GEMM K, conv C*kh*kw, softmax/norm/reduction extents), and the Ks."""
    out: set[int] = set()
    ks: set[int] = set()
    for op in ops:
        shapes, attrs = op.input_shapes, op.attrs
        k = None
        if op.op_class in ("gemm", "batched_gemm"):
            k = attrs.get("K") or (shapes[-1][0] if shapes and len(shapes[-1]) == 1 else 1)
        elif op.op_class == "convolution" and len(shapes) >= 2:
            k = math.prod(shapes[1][1:])
        elif op.op_class == "attention" and len(shapes) >= 2:
            ks.update({shapes[0][-1], shapes[1][-2]})
        elif op.op_class in ("softmax", "scan", "reduction") and shapes and shapes[0]:
            dims = attrs.get("dim") or range(len(shapes[0]))
            out.add(math.prod(shapes[0][d] for d in dims if d < len(shapes[0])))
        elif op.op_class == "normalization" and shapes and shapes[0]:
            x = shapes[0]
            per = attrs.get("per_channel_over")
            out.add(math.prod(attrs["normalized_shape"]) if "normalized_shape" in attrs
                    else math.prod(x[d] for d in per) if per else math.prod(x) // max(1, x[0]))
        if k is not None:
            ks.add(int(k))
    return tuple(sorted(out | ks)), sorted(ks)


def _summary(ops: list[Any]) -> _Cost:
    flops = sum(op.flops for op in ops if op.op_class in _TC)
    lengths, ks = _lengths(ops)
    return _Cost(float(flops), float(sum(op.bytes for op in ops)), lengths, ks)


def _meta_cost(module: Any, sizes: dict[str, int | list[int]], dtype: str) -> _Cost:
    from egg_mcp.analysis.reference_build import build_model
    from egg_mcp.analysis.trace import _trace
    from egg_mcp.problems.problem import apply_size_overrides

    apply_size_overrides(module, None, sizes)
    model, inputs = build_model(module, "meta", dtype)
    raw = _trace(model, inputs)[0]
    return _summary([r.info for r in raw])


def _excess(cost: _Cost) -> float:
    """How far over budget one forward is (<= 1: within)."""
    return max(cost.flops / FLOP_BUDGET, cost.bytes / BYTE_BUDGET)


def _fits(cost: _Cost) -> bool:
    return _excess(cost) <= 1


def _try(module: Any, sizes: dict[str, int | list[int]], dtype: str) -> _Cost | None:
    try:
        return _meta_cost(module, sizes, dtype)
    except Exception:
        return None


def probe_sizes(module: Any, start: dict[str, int], cost: _Cost, dtype: str) -> tuple[dict[str, int], _Cost, str]:
    """The sizes to run the forward at (within budget), its cost there, and the words that say which and why."""
    from egg_mcp.problems.loader import _DIVISOR_NAME, QUICK_FROM, derive_quick_sizes

    if _fits(cost):
        return dict(start), cost, "the problem's sizes"
    small = {k: v for k, v in start.items() if 2 <= v < QUICK_FROM and _DIVISOR_NAME.search(k)}
    sizes, frozen, reducing = dict(start), set(), set()
    while not _fits(cost):  # halve what no reduction length depends on, largest first, where that saves much
        for key in sorted((k for k, v in sizes.items() if start[k] >= QUICK_FROM and k not in frozen),
                          key=lambda k: -sizes[k]):
            v = sizes[key]
            trial = _try(module, {**sizes, key: v // 2}, dtype) if v % 2 == 0 else None
            if trial is not None and trial.lengths != cost.lengths:
                reducing.add(key)
            if trial is None or trial.lengths != cost.lengths or _excess(trial) > 0.9 * _excess(cost):
                frozen.add(key)
                continue
            sizes[key], cost = v // 2, trial
            break
        else:
            break
    kept = cost.lengths
    target = max((sizes[k] for k in reducing), default=0) // 2
    while not _fits(cost) and reducing and target >= 1:  # then the reduction lengths, as quick sizes shrink
        shrunk = derive_quick_sizes({**{k: sizes[k] for k in reducing}, **small}, target)
        if all(sizes[k] == v for k, v in shrunk.items()):
            target //= 2
            continue
        trial = _try(module, {**sizes, **shrunk}, dtype)
        if trial is None:
            break
        sizes, cost, target = {**sizes, **shrunk}, trial, target // 2
    if not _fits(cost):
        at = _changed(start, sizes) or "the problem's sizes"
        raise OutputProbeError(f"one forward needs {cost.flops:.3g} matmul FLOPs and {cost.bytes:.3g} B even at "
                               f"{at} (budget {FLOP_BUDGET:.3g} FLOPs, "
                               f"{BYTE_BUDGET:.3g} B on the CPU)")
    text = _changed(start, sizes)
    if cost.lengths == kept:
        return sizes, cost, f"{text}, every reduction length as in the problem (K {_ks(cost.ks)})"
    return sizes, cost, (f"{text}: reduction lengths shrunk too (K {_ks(cost.ks)}); errors grow with K, so at the "
                         "problem's own sizes they can be larger than measured here")


def _changed(start: dict[str, int], sizes: dict[str, int]) -> str:
    diff = [k for k in sizes if sizes[k] != start[k]]
    if not diff:
        return ""
    return (", ".join(f"{k}={sizes[k]}" for k in diff) + " (the problem's "
            + ", ".join(str(start[k]) for k in diff) + ")")


def _ks(ks: list[int]) -> str:
    return ", ".join(str(k) for k in ks[:6]) + (", ..." if len(ks) > 6 else "")


_PRODUCTS = {"mm": "mm", "addmm": "mm", "bmm": "bmm", "baddbmm": "bmm", "addbmm": "bmm", "matmul": "matmul",
             "mv": "mv", "addmv": "mv", "dot": "dot", "outer": "outer", "ger": "outer", "addr": "outer",
             "linear": "linear", "convolution": "conv", "_convolution": "conv"}
"""The matmul-like aten ops the emulation computes from rounded operands (everything else runs as it is)."""
_OPAQUE = {"_trilinear", "_euclidean_dist", "_cdist_forward", "mkldnn_rnn_layer", "_thnn_fused_lstm_cell",
           "_thnn_fused_gru_cell", "lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell", "rnn_tanh_cell",
           "rnn_relu_cell", "_scaled_mm"}
"""Ops that multiply matrices inside one CPU kernel (bilinear, cdist, RNN layers): the emulation cannot round their
operands, so a forward calling one is not judged at the output."""


def _bilinear(name: str, args: tuple, kwargs: dict) -> tuple[Any, Any, Any, Any, float, float]:
    """(a, b, product(a, b), bias, beta, alpha) of one matmul-like call: out = alpha * product + beta * bias."""
    import torch
    import torch.nn.functional as F

    kind = _PRODUCTS[name]
    if name.startswith("add"):
        bias, a, b = args[0], args[1], args[2]
        beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
    else:
        a, b = args[0], args[1]
        bias = args[2] if kind in ("linear", "conv") and len(args) > 2 else None
        beta = alpha = 1
    rest = args[3:]
    product = {"mm": torch.mm, "bmm": torch.bmm, "matmul": torch.matmul, "mv": torch.mv, "dot": torch.dot,
               "outer": torch.outer, "linear": F.linear,
               "conv": lambda x, w: getattr(torch.ops.aten, name)(x, w, None, *rest)}[kind]
    if name == "addbmm":
        product = lambda x, y: torch.bmm(x, y).sum(0)  # noqa: E731
    if kind == "conv" and bias is not None:
        bias = bias.view(1, -1, *([1] * (a.dim() - 2)))
    return a, b, product, bias, beta, alpha


def _mode(path: str, seen: dict[str, int]) -> Any:
    """A dispatch mode that computes every matmul-like op as `path` does (and refuses one it cannot)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    from egg_mcp.analysis.op_classes import classify_op

    class Emulate(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = func.overloadpacket.__name__
            base = name[:-1] if name.endswith("_") and name[:-1] in _PRODUCTS else name  # addmm_: in place
            if base not in _PRODUCTS:
                flat = [t for t in tree_flatten(args)[0] if isinstance(t, torch.Tensor)]
                if name in _OPAQUE or classify_op(func, flat, []) in _TC:
                    raise OutputProbeError(f"the forward calls aten.{name}, a matmul-like op the emulation does not "
                                           "intercept")
                return func(*args, **kwargs)
            a, b, product, bias, beta, alpha = _bilinear(base, args, kwargs)
            if not (a.is_floating_point() and b.is_floating_point()):
                return func(*args, **kwargs)
            seen[base] = seen.get(base, 0) + 1
            out = _emulate(product, a.float(), b.float(), path)
            out = out * alpha if alpha != 1 else out
            if bias is not None and beta != 0:
                out = out + (bias.float() * beta if beta != 1 else bias.float())
            target = args[0] if base != name else kwargs.get("out")  # in place, or out=
            if target is not None:
                return target.copy_(out)
            return out.to(a.dtype)

    return Emulate()


def _forward(model: Any, inputs: list[Any], mode: Any = None) -> Any:
    import contextlib

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    args = [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]
    model = copy.deepcopy(model)  # a forward may update buffers or its inputs in place: each run starts equal
    torch.manual_seed(0)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), (mode or contextlib.nullcontext()):
        return model(*args)  # attention as bmm + softmax, so its two products are emulated too


def _errors(out: Any, truth: Any) -> tuple[Any, Any, int]:
    """|err| and |truth| of every finite output element (flat, fp64), and how many other elements differ."""
    import torch
    from torch.utils._pytree import tree_flatten

    got = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    want = [t for t in tree_flatten(truth)[0] if isinstance(t, torch.Tensor)]
    if len(got) != len(want) or any(g.shape != w.shape for g, w in zip(got, want)):
        raise OutputProbeError("the emulated forward's outputs differ in number or shape from the fp64 forward's")
    errs, refs, mismatched = [torch.zeros(0, dtype=torch.float64)], [torch.zeros(0, dtype=torch.float64)], 0
    for g, w in zip(got, want):
        if not w.is_floating_point():
            mismatched += int((g != w).sum())
            continue
        g, w = g.detach().double().flatten(), w.detach().double().flatten()
        fin = torch.isfinite(w) & torch.isfinite(g)
        same = (g == w) | (torch.isnan(g) & torch.isnan(w))
        mismatched += int((~fin & ~same).sum())
        errs.append((g[fin] - w[fin]).abs())
        refs.append(w[fin].abs())
    return torch.cat(errs), torch.cat(refs), mismatched


def _merge(e: list[float], r: list[float], ratio: float) -> list[tuple[float, float]]:
    """Consecutive frontier pairs whose err and truth stay within `ratio` of the group's first, as one pair (the
    group's largest err, its smallest truth): at any tolerance it overstates the max share by at most ratio^2."""
    out, first = [], 0
    for i in range(1, len(e) + 1):
        if i == len(e) or e[i] > ratio * e[first] or r[i] > ratio * r[first]:
            out.append((e[i - 1], r[first]))
            first = i
    return out


def _frontier(err: Any, ref: Any, limit: int = FRONTIER_MAX) -> list[tuple[float, float]]:
    """The (|err|, |truth|) pairs no other beats on both counts (the max share at any tolerance is on one of
    them), merged to at most `limit` pairs with the smallest ratio that gets there (`_merge`)."""
    import torch

    if err.numel() == 0:
        return []
    r, order = torch.sort(ref)  # equal truths in any order: a tie can only leave an extra, harmless pair
    e = err[order]
    best = torch.cummax(e, 0).values
    keep = (e > torch.cat([best.new_full((1,), -1.0), best[:-1]])) & (e > 0)
    e, r = e[keep].tolist(), r[keep].tolist()  # along the frontier err rises with truth
    ratio = 1.0
    while len(merged := _merge(e, r, ratio)) > limit:
        ratio = ratio * 1.25 if ratio < 1e6 else float("inf")
    return merged


def _round(x: float, up: bool) -> float:
    """x to 3 significant digits, rounded up (errors, shares) or down (truths): the share only grows."""
    if x == 0 or not math.isfinite(x):
        return x
    r = float(f"{x:.2e}")
    if (r < x) if up else (r > x):
        step = 10.0 ** (math.floor(math.log10(abs(x))) - 2)
        r = float(f"{r + step if up else r - step:.2e}")
    return r


def _path_error(path: str, out: Any, truth: Any, atol: float, rtol: float, ks: list[int]) -> PathError:

    err, ref, mismatched = _errors(out, truth)
    frontier = [(_round(e, True), _round(r, False)) for e, r in _frontier(err, ref)]
    share_max, p99 = max_and_p99(err, atol + rtol * ref)  # verify's definition (evaluation.compare) too
    top = float(ref.max()) if ref.numel() else 0.0
    worst = float(err.max()) if err.numel() else 0.0
    return PathError(path=path, max_abs=_round(worst, True), max_rel=_round(worst / top if top > 0 else 0.0, True),
                     needed_atol=[], k=ks, at="output", frontier=frontier, share_tol=(atol, rtol),
                     max_share_measured=_round(min(share_max, 1e300), True),
                     p99_share=_round(min(p99, 1e300), True), mismatched=mismatched)


def _truth(model: Any, inputs: list[Any]) -> Any:
    """The forward in fp64 (parameters, floating inputs and tensors the forward creates by default dtype)."""
    import torch

    model64 = copy.deepcopy(model).double()
    inputs64 = [t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return _forward(model64, inputs64)
    finally:
        torch.set_default_dtype(previous)


def measure_output_errors(source: str, dtype: str, overrides: dict[str, Any], atol: float, rtol: float,
                          ops: list[Any]) -> tuple[list[PathError], str]:
    """Each compute path's error at the reference's outputs against the fp64 truth, and the method in words.

    `ops` is the analysis trace at the problem's sizes (its cost decides whether to shrink). Raises
    OutputProbeError when the forward cannot be judged at the output (the caller falls back per GEMM)."""
    import torch

    from egg_mcp.analysis.reference_build import build_model, load_reference_module
    from egg_mcp.problems.loader import module_int_constants
    from egg_mcp.problems.problem import apply_size_overrides

    module = load_reference_module(source, overrides)
    start = {k: int(getattr(module, k)) for k, v in module_int_constants(source).items()
             if isinstance(v, int) and isinstance(getattr(module, k, None), int)}
    sizes, cost, where = probe_sizes(module, start, _summary(ops), dtype)
    try:
        apply_size_overrides(module, None, sizes)
        model, inputs = build_model(module, "cpu", dtype)
        truth = _truth(model, inputs)
    except Exception as exc:
        raise OutputProbeError(f"the forward does not run in fp64 on the CPU ({type(exc).__name__}: {exc})") from None
    errors, seen = [], {}
    for path in task_paths(dtype):
        if path == "fp8" and not hasattr(torch, "float8_e4m3fn"):
            continue
        try:
            out = _forward(model, inputs, _mode(path, seen))
        except OutputProbeError:
            raise
        except Exception as exc:
            raise OutputProbeError(f"the forward fails with {path} products on the CPU ({type(exc).__name__}: "
                                   f"{exc})") from None
        errors.append(_path_error(path, out, truth, atol, rtol, cost.ks))
    if not seen:
        raise OutputProbeError("the CPU forward calls no matmul-like op the emulation intercepts")
    calls = ", ".join(f"{n} x{c // len(errors)}" for n, c in seen.items())
    method = (f"judged at the output: the whole forward on the CPU at {where}, in fp64 (the truth) and per path with "
              f"its matmul-like ops ({calls}) from the path's rounded operands (TF32 truncated, 3xTF32 hi rounded + lo "
              "truncated, fp16x3/bf16x3 hi and lo cast unscaled, bf16/fp16/fp8 casts, fp8 per-tensor scaled; fp32 "
              "accumulation), other ops in "
              f"{dtype}; share = |err| / (atol + rtol*|truth|) per output element; admissible when max share <= "
              f"1/{SAFETY:g} (a {SAFETY:g}x margin for the GPU's accumulation order and the reference's own rounding)")
    return errors, method
