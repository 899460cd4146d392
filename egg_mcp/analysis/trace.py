"""Tracing a reference forward: every aten op it runs, classified, with FLOPs, bytes and attributes;
consecutive ops collapsed, and the chains a kernel could fuse (pure; torch imported where needed).

`analysis.reference` turns this into a `ReferenceAnalysis` (floor, summary) and runs it in a worker; `op_classes`
classifies
each op (class, attributes, FLOPs the torch counter ignores).
"""

from __future__ import annotations

import weakref
from typing import Any

from egg_mcp.analysis.analysis_types import FusibleChain, OpInfo
from egg_mcp.analysis.op_classes import (
    CLASS_PRIORITY,
    _dtype_name,
    _elementwise_flops,
    _op_attrs,
    classify_op,
)


class AnalysisError(RuntimeError):
    """The reference could not be analysed; the message says why and what to try."""


class _RawOp:
    __slots__ = ("info", "producers", "out_bytes")

    def __init__(self, info: OpInfo, producers: set[int], out_bytes: int):
        self.info = info
        self.producers = producers
        self.out_bytes = out_bytes


def _trace(model: Any, inputs: list[Any]) -> tuple[list[_RawOp], int, list[Any], list[str]]:
    """Run the forward once under a dispatch recorder and the torch FLOP counter."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    from torch.utils.flop_counter import FlopCounterMode, flop_registry

    raw: list[_RawOp] = []
    producer: dict[int, tuple[weakref.ref, int]] = {}
    notes: list[str] = []

    def producer_of(t: Any) -> int | None:
        entry = producer.get(id(t))
        if entry is not None and entry[0]() is t:
            return entry[1]
        return None

    def remember(t: Any, idx: int | None) -> None:
        if idx is not None:
            try:
                producer[id(t)] = (weakref.ref(t), idx)
            except TypeError:
                pass

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            flat_in = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
            flat_out = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
            op_class = classify_op(func, flat_in, flat_out)
            if op_class == "other":
                # views alias their input: whoever produced the input produced the view
                src = producer_of(flat_in[0]) if flat_in else None
                for o in flat_out:
                    remember(o, src)
                return out
            name = func.overloadpacket.__name__
            attrs = _op_attrs(name, op_class, args, kwargs, flat_in)
            flops = 0
            packet = func.overloadpacket
            if packet in flop_registry:
                try:
                    flops = int(flop_registry[packet](*args, **kwargs, out_val=out))
                except Exception as exc:  # formula signature drift across torch versions
                    notes.append(f"flop formula for aten.{name} failed ({type(exc).__name__}); counted 0")
            else:
                flops = _elementwise_flops(op_class, attrs, flat_in, flat_out)
            in_bytes = sum(t.numel() * t.element_size() for t in flat_in)
            out_bytes = sum(t.numel() * t.element_size() for t in flat_out)
            main_out = flat_out[0] if flat_out else None
            info = OpInfo(
                op=f"aten.{name}",
                op_class=op_class,
                input_shapes=[list(t.shape) for t in flat_in],
                output_shape=list(main_out.shape) if main_out is not None else [],
                dtype=_dtype_name(main_out.dtype) if main_out is not None else "",
                flops=flops,
                bytes=in_bytes + out_bytes,
                attrs=attrs,
            )
            producers = {p for p in (producer_of(t) for t in flat_in) if p is not None}
            raw.append(_RawOp(info, producers, out_bytes))
            for o in flat_out:
                remember(o, len(raw) - 1)
            return out

    with torch.no_grad(), FlopCounterMode(display=False) as counter, Recorder():
        outputs = model(*inputs)
    flat_outputs = [o for o in tree_flatten(outputs)[0] if isinstance(o, torch.Tensor)]
    return raw, int(counter.get_total_flops()), flat_outputs, notes


def _fusion_link(p: str, c: str) -> str | None:
    """Why consumer class `c` can be computed in the same kernel as producer class `p` (None: not)."""
    light = ("elementwise", "broadcast")
    if c in light:
        if p in light:
            return "elementwise chain: one pass, intermediates stay in registers"
        if p in ("gemm", "batched_gemm", "convolution", "attention"):
            return f"{p} epilogue: apply the elementwise ops to the accumulator before the store"
        return f"{p} epilogue: apply the elementwise ops to the {p} result before the store"
    if p in light:
        if c in ("gemm", "batched_gemm", "convolution"):
            return f"{c} prologue: apply the elementwise ops to operand tiles as they are loaded"
        return f"{c} prologue: apply the elementwise ops while loading the {c} input"
    if p in ("gemm", "batched_gemm", "convolution") and c in ("reduction", "softmax", "normalization", "pooling"):
        return f"{c} in the {p} epilogue: needs the tile to cover the reduced extent, else a second pass"
    if p in ("reduction", "softmax", "normalization") and c in ("reduction", "softmax", "normalization"):
        return "reductions over the same rows: one pass over each row"
    if p == "batched_gemm" and c == "softmax":
        return "attention scores: softmax in the QK^T epilogue (online softmax)"
    if p == "softmax" and c == "batched_gemm":
        return "attention: P@V consumes the softmax in registers (flash-style online softmax)"
    return None


def _collapse(raw: list[_RawOp]) -> tuple[list[OpInfo], list[int]]:
    """Merge identical consecutive ops; returns the collapsed ops and raw index -> collapsed index."""
    ops: list[OpInfo] = []
    index: list[int] = []
    for r in raw:
        info = r.info
        if ops:
            last = ops[-1]
            if (last.op, last.input_shapes, last.output_shape, last.dtype, last.attrs) == (
                info.op, info.input_shapes, info.output_shape, info.dtype, info.attrs
            ):
                last.count += 1
                index.append(len(ops) - 1)
                continue
        ops.append(info.model_copy())
        index.append(len(ops) - 1)
    return ops, index


def _chains(raw: list[_RawOp], index: list[int]) -> tuple[list[FusibleChain], bool]:
    """Connected groups of fusible producer->consumer links, and whether attention was seen."""
    parent = list(range(len(raw)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    reasons: dict[int, list[str]] = {}
    link_pairs: list[tuple[int, int, str]] = []
    for ci, r in enumerate(raw):
        for pi in r.producers:
            why = _fusion_link(raw[pi].info.op_class, r.info.op_class)
            if why:
                link_pairs.append((pi, ci, why))
                parent[find(ci)] = find(pi)
    attention = any(
        raw[p].info.op_class == "softmax" and raw[c].info.op_class == "batched_gemm"
        and any(raw[q].info.op_class == "batched_gemm" for q in raw[p].producers | _ancestors(raw, p))
        for p, c, _ in link_pairs
    )
    saved: dict[int, int] = {}
    internal_producers: dict[int, set[int]] = {}
    for pi, ci, why in link_pairs:
        root = find(pi)
        lst = reasons.setdefault(root, [])
        if why not in lst:
            lst.append(why)
        internal_producers.setdefault(root, set()).add(pi)
    for root, prods in internal_producers.items():
        saved[root] = sum(2 * raw[p].out_bytes for p in prods)
    groups: dict[int, set[int]] = {}
    for i in range(len(raw)):
        groups.setdefault(find(i), set()).add(i)
    chains = []
    for root, members in groups.items():
        if len(members) < 2:
            continue
        collapsed = sorted({index[i] for i in members})
        reason = "; ".join(reasons.get(root, []))
        if attention and any(raw[i].info.op_class == "softmax" for i in members):
            reason = "attention pattern (QK^T -> softmax -> PV): one flash-style kernel; " + reason
        chains.append(FusibleChain(op_indices=collapsed, reason=reason, saved_bytes=saved.get(root, 0)))
    chains.sort(key=lambda ch: ch.op_indices[0])
    return chains, attention


def _ancestors(raw: list[_RawOp], i: int, depth: int = 4) -> set[int]:
    """Producers up to `depth` links back (attention has scale / mask ops between QK^T and softmax)."""
    seen: set[int] = set()
    frontier = set(raw[i].producers)
    for _ in range(depth):
        seen |= frontier
        frontier = {p for f in frontier for p in raw[f].producers} - seen
    return seen


def _ordered_classes(ops: list[OpInfo], attention: bool) -> list[str]:
    present = {op.op_class for op in ops if op.op_class != "other"}
    if attention:
        present.add("attention")
    return [c for c in CLASS_PRIORITY if c in present]
