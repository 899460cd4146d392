"""A candidate's kernels told apart: each launch with its own kind, dims, parameters and dot precision.

A multi-kernel candidate (an attention block: a qkv projection GEMM, a flash-attention kernel, an output
projection GEMM) is priced launch by launch: each launch gets the dims it was launched with (read by the
meta-device probe, `launches.py`), the kind its own tl.* calls say, and only the parameters bound to
its own launch sites (`KernelFacts.bindings`), so no rule mixes ATTN_BLOCK_M with a GEMM's BLOCK_N and no
kernel inherits another's num_warps (a kernel launched without num_warps gets Triton's default, 4).
Without a probe (it failed, or none was run) a single-kernel candidate keeps the task's dims and kind;
in a multi-kernel one, only the kernels whose kind matches the task's are priced, and the reply says so.
"""

from __future__ import annotations

import math

from egg_mcp.tiling.dims import _ALIASES, axis_for, check_kind, next_pow2, normalize_dims
from egg_mcp.tiling.source_index import role_of
from egg_mcp.tiling.tiling_types import CandidateSpace, KernelCall, KernelFacts, TunableParam

TRITON_DEFAULTS = {"num_warps": 4, "num_stages": 3}


def kernel_kind(facts: KernelFacts) -> str:
    """The cost model for one kernel, from its own tl.* calls."""
    calls = set(facts.tl_calls)
    if facts.uses_dot and facts.n_dots >= 2 and ({"exp", "exp2"} & calls) and facts.has_loop:
        return "attention"
    if facts.uses_dot:
        return "gemm"
    if {"exp", "exp2"} & calls and "max" in calls and "sum" in calls:
        return "softmax"
    if {"rsqrt", "sqrt"} & calls and "sum" in calls:
        return "norm"
    if {"sum", "max", "min", "reduce", "argmax", "argmin", "cumsum"} & calls:
        return "reduction"
    return "elementwise"


def _int_named(ints: dict[str, int], names: tuple[str, ...]) -> int | None:
    lowered = {k.lower(): v for k, v in ints.items()}
    return next((lowered[n.lower()] for n in names if n.lower() in lowered), None)


def _prod(xs) -> int:
    return math.prod(xs) if xs else 1


def launch_dims(kind: str, record: dict, persistent: bool = False) -> dict[str, int] | None:
    """A launch's own dims (canonical names) from its int arguments, else its tensor shapes; None if unknown. An
    attention launch's batch x heads is its program count over its query tiles, on whichever grid axis (or a flat
    grid) they are; not for a persistent grid, which does not follow the tiles."""
    ints = dict(record.get("ints") or {})
    tensors = [s for s in (record.get("tensors") or {}).values() if s]
    constexprs = record.get("constexprs") or {}
    if kind == "gemm":
        m = _int_named(ints, ("M", *_ALIASES["gemm"]["M"]))
        n = _int_named(ints, ("N", *_ALIASES["gemm"]["N"]))
        k = _int_named(ints, ("K", *_ALIASES["gemm"]["K"]))
        mats = [s for s in tensors if len(s) >= 2]
        if (m is None or k is None) and mats:
            m, k = _prod(mats[0][:-1]), mats[0][-1]
        if n is None and len(mats) >= 2:
            n = mats[1][0] if mats[1][-1] == k else mats[1][-1]
        return {"M": m, "N": n, "K": k} if m is not None and n is not None and k is not None else None
    if kind == "attention":
        t = _int_named(ints, ("T", "N_CTX", "seq_len", "seqlen", "S", "L"))
        d = _int_named(ints, ("HEAD_DIM", "D", "head_dim", "hs"))
        q = next((s for s in tensors if len(s) >= 3), None)
        if t is None and q is not None:
            t = q[-2]
        if d is None and q is not None:
            d = q[-1]
        block_t = next((v for k, v in constexprs.items() if isinstance(v, int) and v > 0
                        and axis_for(k, "attention", {"T": 1}) == "T"), None)
        tiles = math.ceil(t / block_t) if t and block_t else 0
        programs = 0 if persistent else math.prod(record.get("grid") or [0])
        bh = programs // tiles if tiles and programs and programs % tiles == 0 else None
        if bh is None:
            heads = _int_named(ints, ("H", "n_head", "heads", "num_heads")) or 1
            batch = _int_named(ints, ("B", "Z", "batch")) or (q[0] if q is not None and len(q) >= 4 else 1)
            bh = heads * batch
        if t is None or d is None:
            return None
        block_d = next((v for k, v in constexprs.items() if k.upper() in ("BLOCK_D", "BLOCK_DMODEL", "HEAD_DIM")
                        and isinstance(v, int)), next_pow2(d))
        return {"BH": bh, "T": t, "S": t, "D": max(d, block_d)}
    rows = _int_named(ints, ("n_rows", *_ALIASES["rows"]["n_rows"]))
    cols = _int_named(ints, ("n_cols", *_ALIASES["rows"]["n_cols"]))
    if kind == "elementwise":
        n = _int_named(ints, ("n", *_ALIASES["flat"]["n"]))
        if n is not None and cols is None:
            return {"n": n}
    if cols is None and tensors:
        cols, rows = tensors[0][-1], _prod(tensors[0][:-1])
    if rows is None and cols is not None:  # a row kernel passed only its row length: the rows are its tensor's
        rows = next((_prod(s[:-1]) for s in tensors if s[-1] == cols), None)
    if cols is None:
        return None
    return normalize_dims(kind, {"n_rows": rows or 1, "n_cols": cols})


def call_axis(seen: str, param: TunableParam, call: KernelCall) -> str | None:
    """The dim a block tiles in one launch: what the name the kernel knows it by says (LIN_BLOCK_M passed as
    BLOCK_M tiles the GEMM's M), else its own name, else what the launch's grid shows (`grid_axes`)."""
    if call.dims_from == "task" and seen == param.name and param.axis:
        return param.axis
    return (axis_for(seen, call.kind, call.dims) or axis_for(param.name, call.kind, call.dims)
            or call.axes.get(seen))


def grid_axes(call: KernelCall, space: CandidateSpace, launched: dict[str, int], persistent: bool) -> dict[str, str]:
    """Blocks whose names do not say what they tile, read from the grid: G = ceil(d / B) programs along a dim d
    no named block tiles, when exactly one such dim divides the launch's program count (a reduction's
    REDUCE_BLOCK over n). A persistent grid does not follow the tiles, so it shows nothing."""
    programs = math.prod(call.grid) if call.grid else 0
    if not programs or persistent:
        return {}
    named, unnamed = set(), {}
    for seen, name in call.params.items():
        p, value = space.param(name), launched.get(seen)
        if p is None or (role_of(seen) if role_of(seen) != "other" else p.role) != "block":
            continue
        axis = axis_for(seen, call.kind, call.dims) or axis_for(name, call.kind, call.dims)
        if axis:
            named.add(axis)
        elif isinstance(value, int) and value > 0:
            unnamed[seen] = value
    out = {}
    for seen, value in unnamed.items():
        fits = [d for d, n in call.dims.items() if d not in named and 1 < math.ceil(n / value)
                and programs % math.ceil(n / value) == 0]
        if len(fits) == 1:
            out[seen] = fits[0]
    return out


def _blind_blocks(calls: list[KernelCall], space: CandidateSpace) -> list[str]:
    """Tuned blocks no launch ties to a dim: the model prices every value of them alike, and says so."""
    notes = []
    for call in calls:
        for seen, name in call.params.items():
            p = space.param(name)
            if (p is not None and p.applicable and len(p.choices) > 1 and p.role == "block"
                    and call_axis(seen, p, call) is None):
                notes.append(f"{call.kernel}: neither the name {seen} nor its grid says which dim it tiles; the model "
                             f"prices every {name} alike (rank it by measured times, or name it BLOCK_<dim>)")
    return notes


def _params_of(facts: KernelFacts, space: CandidateSpace, single: bool) -> dict[str, str]:
    if single:  # one kernel: every parameter is its own (the source may launch it through an alias)
        return {p.name: p.name for p in space.params}
    params = dict(facts.bindings)
    bound_anywhere = {v for k in space.kernels for v in k.bindings.values()}
    for p in space.params:  # knobs bound to no kernel's launch (e.g. set through a **meta dict) apply to all
        if p.name not in bound_anywhere and p.role in ("warps", "stages", "group", "split"):
            params.setdefault({"warps": "num_warps", "stages": "num_stages"}.get(p.role, p.name), p.name)
    return params


def kernel_calls(space: CandidateSpace, kind: str, dims: dict[str, int],
                 launches: list[dict] | None = None) -> tuple[list[KernelCall], list[str]]:
    """The launches the model prices: from the probe's records when given, else one per kernel at the task's
    dims (only kernels whose own kind is the task's when there are several). Returns (calls, notes)."""
    check_kind(kind)
    facts = {k.name: k for k in space.kernels}
    single = len(space.kernels) <= 1
    notes: list[str] = []
    calls: list[KernelCall] = []
    for record in launches or []:
        fact = facts.get(record.get("kernel", ""))
        if fact is None:
            continue
        own_kind = kernel_kind(fact) if not single else kind
        own = launch_dims(own_kind, record, fact.persistent)
        if own is None:
            notes.append(f"{fact.name}: its launch did not show its dims; priced at the task's dims")
            own, own_kind = dims, kind
        fixed = {k: v for k, v in (record.get("constexprs") or {}).items()
                 if isinstance(v, int) and not isinstance(v, bool) and k not in fact.bindings}
        for option in ("num_warps", "num_stages"):
            if option not in fact.bindings:
                value = record.get(option)
                fixed[option] = value if isinstance(value, int) else TRITON_DEFAULTS[option]
        call = KernelCall(kernel=fact.name, kind=own_kind, dims=own, params=_params_of(fact, space, single),
                          fixed=fixed, precision=fact.dot_precision, dims_from="launch",
                          grid=[int(g) for g in record.get("grid") or []])
        call.axes = grid_axes(call, space, record.get("constexprs") or {}, fact.persistent)
        calls.append(call)
    if calls:
        return calls, notes + _blind_blocks(calls, space)
    chosen = space.kernels if single else [k for k in space.kernels if kernel_kind(k) == kind]
    if not chosen and space.kernels:
        chosen = space.kernels[:1]
    if not single and len(chosen) < len(space.kernels):
        skipped = [k.name for k in space.kernels if k not in chosen]
        notes.append(f"no launch probe: kernels {', '.join(skipped)} are not priced (their dims are unknown); "
                     "the ranking covers " + ", ".join(k.name for k in chosen))
    for fact in chosen or [None]:
        if fact is None:
            calls.append(KernelCall(kernel="kernel", kind=kind, dims=dims,
                                    params={p.name: p.name for p in space.params}))
            continue
        fixed = {} if single else {o: TRITON_DEFAULTS[o] for o in ("num_warps", "num_stages") if o not in fact.bindings}
        calls.append(KernelCall(kernel=fact.name, kind=kind, dims=dims, params=_params_of(fact, space, single),
                                fixed=fixed, precision=fact.dot_precision))
    return calls, notes + _blind_blocks(calls, space)


# ------------------------------------------------------------------------------------------ ranks


def _ranks(xs: list[float]) -> list[float]:
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for t in range(i, j + 1):
            ranks[order[t]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(predicted: list[float], measured: list[float]) -> float | None:
    """Spearman's rho (average ranks for ties; Pearson on the ranks), pure Python; None below 3 pairs or
    when either side is constant."""
    if len(predicted) != len(measured) or len(predicted) < 3:
        return None
    a, b = _ranks(predicted), _ranks(measured)
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    va, vb = sum((x - ma) ** 2 for x in a), sum((y - mb) ** 2 for y in b)
    if va == 0 or vb == 0:
        return None
    return cov / math.sqrt(va * vb)
