"""Analysis of a KernelBench reference: aten operators, FLOPs, minimum bytes, op classes, floor.

The reference is user code, so the server never imports it: `analyze_reference` (server side)
sends the source to a worker process through the evaluator, and `analyze_job` (worker side) loads
it and calls the pure `analyze_model`. Tracing runs on meta tensors first — shapes without data,
so KernelBench L1's 32768x32768 inputs cost nothing — and falls back to real tensors (CUDA when
present, else a CPU small enough to hold them) only when the forward needs data (`.item()`,
`nonzero`, data-dependent control flow).

torch is imported inside the functions that need it: this module is imported by the server.
"""

from __future__ import annotations

import math
import tempfile
import uuid
import weakref
from pathlib import Path
from typing import Any

from egg_mcp.analysis.models import OP_CLASSES, FusibleChain, OpInfo, ReferenceAnalysis
from egg_mcp.analysis.roofline import (
    candidate_compute_types,
    compute_type_for,
    fmt_bytes,
    fmt_flops,
    fmt_ms,
    fmt_shape,
    roofline_floor,
)
from egg_mcp.evaluation.api import TolerancePolicy
from egg_mcp.hardware import NO_GPU, GpuSpec, gpu_status, spec_for, unknown_gpu_message


class AnalysisError(RuntimeError):
    """The reference could not be analysed; the message says why and what to try."""


# FLOPs charged per element for ops the torch flop counter ignores (it counts GEMM/conv/attention
# only). Rough on purpose: these ops are memory-bound and only the order of magnitude matters.
FLOPS_PER_ELEMENT: dict[str, int] = {
    "elementwise": 1,  # per output element
    "broadcast": 1,  # per output element
    "reduction": 1,  # per input element
    "scan": 1,  # per input element
    "softmax": 5,  # max, subtract, exp, sum, divide
    "normalization": 7,  # mean, subtract, square, sum, rsqrt-scale, weight, bias
    "pooling": 1,  # per window element read (per input element for adaptive pooling)
    "gather_scatter": 0,
    "other": 0,
}

TENSOR_CORE_CLASSES = frozenset({"gemm", "batched_gemm", "convolution", "attention"})

# Heaviest (most algorithm-defining) first: the order of `op_classes` and of seed paradigms.
CLASS_PRIORITY: tuple[str, ...] = (
    "attention",
    "convolution",
    "gemm",
    "batched_gemm",
    "normalization",
    "softmax",
    "scan",
    "pooling",
    "reduction",
    "gather_scatter",
    "broadcast",
    "elementwise",
)
assert set(CLASS_PRIORITY) == set(OP_CLASSES)

_GEMM = {"mm", "addmm", "mv", "addmv", "dot", "vdot", "matmul", "linear", "_scaled_mm", "addr", "outer"}
_BATCHED_GEMM = {"bmm", "baddbmm"}
_CONV = {"convolution", "_convolution", "cudnn_convolution", "convolution_overrideable", "_slow_conv2d_forward",
         "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
         "mkldnn_convolution", "cudnn_convolution_transpose", "slow_conv3d_forward", "slow_conv_transpose2d",
         "slow_conv_transpose3d", "_slow_conv2d", "thnn_conv2d", "slow_conv_dilated2d", "slow_conv_dilated3d"}
_SOFTMAX = {"_softmax", "softmax", "_log_softmax", "log_softmax", "_safe_softmax"}
_NORM = {"native_layer_norm", "layer_norm", "native_batch_norm", "_native_batch_norm_legit",
         "_native_batch_norm_legit_no_training", "_native_batch_norm_legit_functional", "batch_norm",
         "cudnn_batch_norm", "miopen_batch_norm", "native_group_norm", "group_norm", "instance_norm",
         "rms_norm", "_fused_rms_norm", "_batch_norm_impl_index", "_batch_norm_with_update",
         "_batch_norm_no_update"}
_SCAN = {"cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "_cummax_helper", "_cummin_helper"}
_GATHER = {"gather", "scatter", "scatter_add", "scatter_reduce", "index", "index_select", "index_put",
           "index_put_", "_index_put_impl_", "index_add", "index_copy", "index_fill", "embedding",
           "take", "take_along_dim", "masked_scatter", "masked_select", "nonzero", "_embedding_bag",
           "embedding_bag", "scatter_", "scatter_add_", "sort", "topk", "kthvalue", "argsort", "unique",
           "_unique2", "searchsorted", "bucketize", "histc", "bincount", "one_hot"}
_REDUCTION = {"sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "prod", "var", "std",
              "var_mean", "std_mean", "norm", "linalg_vector_norm", "logsumexp", "any", "all", "aminmax",
              "nansum", "nanmean", "median", "mode", "count_nonzero"}
_CREATION = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
             "full_like", "randn", "randn_like", "rand", "rand_like", "randint", "randint_like", "normal_",
             "uniform_", "scalar_tensor", "arange", "new_empty", "new_empty_strided", "new_zeros", "new_ones",
             "new_full", "fill_", "zero_", "bernoulli_", "lift_fresh", "lift_fresh_copy", "eye", "linspace",
             "set_", "resize_", "_local_scalar_dense", "detach", "alias", "_assert_async", "sym_size",
             "sym_stride", "sym_numel", "is_nonzero", "item", "_unsafe_index_put"}
_VIEWS = {"t", "view", "_unsafe_view", "reshape", "expand", "permute", "transpose", "unsqueeze", "squeeze",
          "slice", "select", "as_strided", "unbind", "split", "split_with_sizes", "chunk", "narrow",
          "diagonal", "unfold", "view_as", "view_as_real", "view_as_complex", "movedim", "_reshape_alias",
          "expand_as", "flatten", "unflatten", "numpy_T", "mT", "mH", "T", "H", "adjoint", "swapaxes",
          "squeeze_", "unsqueeze_", "t_", "transpose_", "as_strided_", "_neg_view", "_conj", "conj",
          "real", "imag", "contiguous"}


def _has_tag(func: Any, tag_name: str) -> bool:
    import torch

    tag = getattr(torch.Tag, tag_name, None)
    return tag is not None and tag in getattr(func, "tags", ())


def classify_op(func: Any, tensor_inputs: list[Any], outputs: list[Any]) -> str:
    """Op class of one aten call ("other" for creation, views and ops outside the vocabulary)."""
    name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
    base = name.rstrip("_") if name not in _CREATION else name
    if name in _CREATION or base in _CREATION:
        return "other"
    if getattr(func, "is_view", False) or name in _VIEWS:
        return "other"
    if name in _CONV or "conv" in name and "convert" not in name:
        return "convolution"
    if name in _BATCHED_GEMM:
        return "batched_gemm"
    if name in _GEMM:
        return "gemm"
    if "scaled_dot_product" in name or "flash_attention" in name or "efficient_attention" in name \
            or "flex_attention" in name:
        return "attention"
    if name in _SOFTMAX:
        return "softmax"
    if name in _NORM or base in _NORM:
        return "normalization"
    if "pool" in name:
        return "pooling"
    if name in _SCAN or base in _SCAN:
        return "scan"
    if name in _GATHER or base in _GATHER:
        return "gather_scatter"
    if name in _REDUCTION or _has_tag(func, "reduction"):
        return "reduction"
    if not outputs:
        return "other"
    out_numel = outputs[0].numel()
    if out_numel <= 1 and all(t.numel() <= 1 for t in tensor_inputs) and not _has_tag(func, "reduction"):
        return "other"  # scalar bookkeeping (e.g. BatchNorm's num_batches_tracked += 1)
    if _has_tag(func, "pointwise") or name in ("_to_copy", "copy", "copy_", "clone", "cat", "stack", "where",
                                               "masked_fill", "clamp", "hardtanh", "pad", "constant_pad_nd",
                                               "flip", "roll", "repeat", "tile", "tril", "triu", "lerp",
                                               "softplus", "hardswish", "mish", "silu", "elu", "selu",
                                               "celu", "glu", "logit", "dropout", "native_dropout",
                                               "threshold", "hardsigmoid", "softshrink", "hardshrink"):
        sizes = [t.numel() for t in tensor_inputs]
        if any(1 < n < out_numel for n in sizes):
            return "broadcast"
        return "elementwise"
    # Unknown compute op: treat same-size in/out as elementwise, shrinking ones as reductions.
    if tensor_inputs and out_numel < tensor_inputs[0].numel():
        return "reduction"
    if tensor_inputs:
        return "elementwise"
    return "other"


def _norm_dim(dim: int, ndim: int) -> int:
    return dim + ndim if dim < 0 and ndim > 0 else dim


def _op_attrs(name: str, op_class: str, args: tuple, kwargs: dict, tensor_inputs: list[Any]) -> dict[str, Any]:
    """The few arguments that choose an algorithm (reduced dim, kernel size, GEMM M/N/K...)."""
    attrs: dict[str, Any] = {}
    x = tensor_inputs[0] if tensor_inputs else None
    ndim = x.dim() if x is not None else 0

    def dims(value: Any) -> list[int] | None:
        if isinstance(value, int):
            return [_norm_dim(value, ndim)]
        if isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
            return [_norm_dim(v, ndim) for v in value]
        return None

    try:
        if op_class in ("softmax", "scan") and len(args) > 1:
            attrs["dim"] = dims(args[1])
        elif op_class == "reduction":
            d = dims(args[1]) if len(args) > 1 else dims(kwargs.get("dim"))
            attrs["dim"] = d if d else list(range(ndim))
        elif op_class == "normalization":
            if name in ("native_layer_norm", "layer_norm") and len(args) > 1:
                attrs["normalized_shape"] = list(args[1])
            elif name in ("native_group_norm",) and len(args) > 6:
                attrs["groups"] = int(args[6])
            elif "batch_norm" in name:
                attrs["per_channel_over"] = [0] + list(range(2, ndim))
        elif op_class == "convolution" and len(args) >= 9:
            w = tensor_inputs[1]
            attrs.update(stride=list(args[3]), padding=list(args[4]), dilation=list(args[5]),
                         transposed=bool(args[6]), groups=int(args[8]), kernel=list(w.shape[2:]))
        elif op_class == "pooling":
            if len(args) > 1 and isinstance(args[1], (list, tuple)):
                key = "output_size" if "adaptive" in name else "kernel_size"
                attrs[key] = list(args[1])
            if len(args) > 2 and isinstance(args[2], (list, tuple)) and "adaptive" not in name:
                attrs["stride"] = list(args[2]) or attrs.get("kernel_size")
        elif op_class in ("gemm", "batched_gemm"):
            mats = [t for t in tensor_inputs if t.dim() >= 2]
            if len(mats) >= 2:
                a, b = mats[-2], mats[-1]
                attrs.update(M=int(a.shape[-2]), K=int(a.shape[-1]), N=int(b.shape[-1]))
                if op_class == "batched_gemm":
                    attrs["batch"] = int(a.shape[0])
    except (IndexError, TypeError, ValueError, AttributeError):
        pass
    return attrs


def _elementwise_flops(op_class: str, attrs: dict[str, Any], tensor_inputs: list[Any], outputs: list[Any]) -> int:
    per = FLOPS_PER_ELEMENT.get(op_class, 0)
    if not per:
        return 0
    out_numel = outputs[0].numel() if outputs else 0
    in_numel = tensor_inputs[0].numel() if tensor_inputs else 0
    if op_class in ("elementwise", "broadcast"):
        return per * out_numel
    if op_class == "pooling" and "kernel_size" in attrs:
        return per * out_numel * math.prod(attrs["kernel_size"])
    return per * in_numel


def _dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


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


def analyze_model(
    model: Any,
    inputs: list[Any],
    *,
    gpu: GpuSpec | None,
    dtype: str,
    tolerance: TolerancePolicy | None = None,
    size_overrides: dict[str, int] | None = None,
    traced_on: str | None = None,
    gpu_missing: str = NO_GPU,
) -> ReferenceAnalysis:
    """Trace `model(*inputs)` once (meta tensors welcome) and describe its workload on `gpu`.

    `model` and `inputs` must already be in the task dtype. The floor uses the tensor-core compute
    type `tolerance` allows (strict policy when None); `floors_ms` quotes the alternatives.
    """
    import torch

    raw, counter_flops, outputs, notes = _trace(model, inputs)
    ops, index = _collapse(raw)
    chains, attention = _chains(raw, index)

    tc_flops = sum(r.info.flops for r in raw if r.info.op_class in TENSOR_CORE_CLASSES)
    if counter_flops and counter_flops != tc_flops:
        notes.append(f"torch FlopCounterMode counted {counter_flops} GEMM/conv FLOPs, per-op sum {tc_flops}; "
                     "using the counter")
        tc_flops = counter_flops
    other_flops = sum(r.info.flops for r in raw if r.info.op_class not in TENSOR_CORE_CLASSES)
    flops = tc_flops + other_flops

    tensor_inputs = [t for t in inputs if isinstance(t, torch.Tensor)]
    seen: set[int] = set()
    param_count = param_bytes = 0
    for t in list(model.parameters()) + list(model.buffers()):
        if id(t) in seen:
            continue
        seen.add(id(t))
        param_count += t.numel() if t.is_floating_point() or t.dim() else 0
        param_bytes += t.numel() * t.element_size()
    in_bytes = sum(t.numel() * t.element_size() for t in tensor_inputs)
    out_bytes = sum(t.numel() * t.element_size() for t in outputs)
    min_bytes = in_bytes + out_bytes + param_bytes

    compute_type = compute_type_for(dtype, tolerance)
    floor, floors, floor_text = None, {}, f"floor: {gpu_missing}"
    if gpu is not None:
        floor = roofline_floor(flops, tc_flops, min_bytes, gpu, compute_type)
        floors = {ct: roofline_floor(flops, tc_flops, min_bytes, gpu, ct).floor_ms
                  for ct in candidate_compute_types(dtype) if ct in gpu.peak_flops}
        floor_text = f"floor {fmt_ms(floor.floor_ms)} on {gpu.name} ({compute_type}, {floor.bound}-bound, {gpu.source})"
    classes = _ordered_classes(ops, attention)
    if traced_on is None:
        devs = {t.device.type for t in tensor_inputs}
        traced_on = devs.pop() if len(devs) == 1 else "cpu"

    doc = (type(model).__doc__ or "").strip().splitlines()
    problem_doc = doc[0].strip() if doc else ""
    n_calls = sum(op.count for op in ops)
    ai = flops / min_bytes if min_bytes else 0.0
    summary = (
        f"{type(model).__name__}({', '.join(fmt_shape(t.shape) for t in tensor_inputs)}) {dtype} -> "
        f"{', '.join(fmt_shape(t.shape) for t in outputs)}: {n_calls} aten ops ({', '.join(classes) or 'none'}); "
        f"{fmt_flops(flops)}, min traffic {fmt_bytes(min_bytes)}, AI {ai:.3g} FLOP/B; "
        f"{floor_text}"
    )
    if chains:
        notes.append(
            f"eager moves {fmt_bytes(sum(r.info.bytes for r in raw))} through DRAM; "
            f"fusing the chains saves {fmt_bytes(sum(c.saved_bytes for c in chains))}"
        )
    if traced_on == "meta":
        notes.append("traced on meta tensors: shapes and FLOPs exact, no data touched")
    return ReferenceAnalysis(
        summary=summary,
        problem_doc=problem_doc,
        ops=ops,
        fusible_chains=chains,
        op_classes=classes,
        flops=flops,
        tensor_core_flops=tc_flops,
        min_bytes=min_bytes,
        unfused_bytes=sum(r.info.bytes for r in raw),
        arithmetic_intensity=ai,
        input_shapes=[list(t.shape) for t in tensor_inputs],
        input_dtypes=[_dtype_name(t.dtype) for t in tensor_inputs],
        output_shapes=[list(t.shape) for t in outputs],
        param_count=param_count,
        param_bytes=param_bytes,
        dtype=dtype,
        floor=floor,
        floor_unavailable=None if floor is not None else gpu_missing,
        floors_ms=floors,
        size_overrides=dict(size_overrides or {}),
        traced_on=traced_on,
        notes=notes,
    )


# ----------------------------------------------------------------------------------------------
# Worker side


CPU_TRACE_LIMIT_BYTES = 2 * 1024**3
"""Largest inputs + parameters a CPU fallback trace may allocate (the CPU is shared)."""


def load_reference_module(source: str, size_overrides: dict[str, int] | None = None) -> Any:
    """Write `source` to a real file (tracebacks and @triton.jit need one) and import it."""
    workdir = Path(tempfile.mkdtemp(prefix="egg_ref_"))
    name = f"egg_reference_{uuid.uuid4().hex[:8]}"
    from egg_mcp.evaluation.modules import import_source

    module = import_source(source, workdir / f"{name}.py", name)
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, attr):
            raise AnalysisError(
                f"the reference defines no `{attr}`; a KernelBench reference needs class Model, get_inputs() "
                "and get_init_inputs()"
            )
    for key, value in (size_overrides or {}).items():
        current = getattr(module, key, None)
        if not isinstance(current, int) or isinstance(current, bool):
            known = sorted(k for k, v in vars(module).items()
                           if isinstance(v, int) and not isinstance(v, bool) and not k.startswith("_"))
            raise AnalysisError(
                f"size override {key!r} is not a module-level int constant of the reference; "
                f"overridable constants: {', '.join(known) or 'none'}"
            )
        setattr(module, key, int(value))
    return module


def _torch_dtype(dtype: str) -> Any:
    import torch

    table = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    if dtype not in table:
        raise AnalysisError(f"unsupported dtype {dtype!r}; use one of {', '.join(table)}")
    return table[dtype]


def _build(module: Any, device: str, dtype: str) -> tuple[Any, list[Any]]:
    import torch

    tdtype = _torch_dtype(dtype)
    torch.manual_seed(0)
    with torch.device(device):
        init = list(module.get_init_inputs())
        model = module.Model(*init)
        inputs = list(module.get_inputs())
    model = model.to(device=device, dtype=tdtype)
    inputs = [
        (t.to(device=device, dtype=tdtype) if t.is_floating_point() else t.to(device))
        if isinstance(t, torch.Tensor) else t
        for t in inputs
    ]
    return model, inputs


def _input_bytes(module: Any) -> int | None:
    """Bytes of inputs + parameters, from a meta build (None when even that fails)."""
    try:
        model, inputs = _build(module, "meta", "float32")
    except Exception:
        return None
    import torch

    total = sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))
    return total + sum(p.numel() * p.element_size() for p in model.parameters())


def analyze_job(payload: dict[str, Any]) -> dict[str, Any]:
    """Worker entry point: payload {reference_source, dtype, size_overrides, gpu_name[, gpu_spec, tolerance]}.

    Returns `ReferenceAnalysis.model_dump(mode="json")`.
    """
    import torch

    source = payload.get("reference_source")
    if not isinstance(source, str) or not source.strip():
        raise AnalysisError("payload has no reference_source")
    dtype = payload.get("dtype") or "float32"
    overrides = dict(payload.get("size_overrides") or {})
    tol = payload.get("tolerance")
    tolerance = TolerancePolicy(**tol) if isinstance(tol, dict) else None
    gpu_name = payload.get("gpu_name")
    gpu_missing = str(payload.get("gpu_missing") or NO_GPU)
    if isinstance(payload.get("gpu_spec"), dict):
        gpu = GpuSpec.model_validate(payload["gpu_spec"])
    elif gpu_name:
        gpu = spec_for(gpu_name)
        gpu_missing = unknown_gpu_message(gpu_name) if gpu is None else gpu_missing
    else:
        gpu = None

    module = load_reference_module(source, overrides)
    meta_error: Exception | None = None
    try:
        model, inputs = _build(module, "meta", dtype)
        return analyze_model(model, inputs, gpu=gpu, dtype=dtype, tolerance=tolerance, gpu_missing=gpu_missing,
                             size_overrides=overrides, traced_on="meta").model_dump(mode="json")
    except AnalysisError:
        raise
    except Exception as exc:  # data-dependent forward, explicit device= in get_inputs, ...
        meta_error = exc

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        size = _input_bytes(module)
        if size is not None and size > CPU_TRACE_LIMIT_BYTES:
            raise AnalysisError(
                f"the forward cannot run on meta tensors ({type(meta_error).__name__}: {meta_error}) and its "
                f"inputs ({size / 1e9:.1f} GB) are too large to trace on this CPU; pass size_overrides "
                "(e.g. the problem's QUICK_SIZES) or analyse on a GPU machine"
            )
    try:
        model, inputs = _build(module, device, dtype)
        result = analyze_model(model, inputs, gpu=gpu, dtype=dtype, tolerance=tolerance, gpu_missing=gpu_missing,
                               size_overrides=overrides, traced_on=device)
    except Exception as exc:
        raise AnalysisError(
            f"the reference forward failed on meta tensors ({type(meta_error).__name__}: {meta_error}) "
            f"and on {device} ({type(exc).__name__}: {exc}); check that Model(*get_init_inputs()) "
            "runs on get_inputs()"
        ) from exc
    result.notes.append(
        f"meta trace failed ({type(meta_error).__name__}); traced on {device} with real tensors"
    )
    return result.model_dump(mode="json")


# ----------------------------------------------------------------------------------------------
# Server side


async def analyze_reference(
    evaluator: Any,
    reference_source: str,
    *,
    dtype: str,
    gpu: GpuSpec | None,
    size_overrides: dict[str, int] | None = None,
    timeout_s: float = 120,
    tolerance: TolerancePolicy | None = None,
) -> ReferenceAnalysis:
    """Analyse a reference in an isolated worker (the reference is user code; never import it here)."""
    payload: dict[str, Any] = {
        "reference_source": reference_source,
        "dtype": dtype,
        "size_overrides": dict(size_overrides or {}),
    }
    if gpu is not None:
        payload["gpu_name"], payload["gpu_spec"] = gpu.name, gpu.model_dump(mode="json")
    else:  # say why there are no ceilings: no GPU, or a GPU without a datasheet lead or a calibration
        payload["gpu_missing"] = gpu_status() or "no GPU ceilings (the server evaluates in the interpreter)"
    if tolerance is not None:
        payload["tolerance"] = tolerance.model_dump(mode="json")
    outcome = await evaluator.run_job(
        "egg_mcp.analysis.reference:analyze_job", payload, timeout_s=timeout_s, uses_gpu=False
    )
    if not outcome.ok or outcome.result is None:
        if outcome.timed_out:
            raise AnalysisError(
                f"reference analysis timed out after {timeout_s:.0f} s; the reference forward may be too large "
                "for the worker: pass size_overrides or raise the timeout"
            )
        if outcome.error is not None:
            where = f" (line {outcome.error.candidate_line})" if outcome.error.candidate_line else ""
            detail = f"{outcome.error.kind}: {outcome.error.message}{where}"
        else:
            tail = (outcome.stderr_tail or outcome.stdout_tail or "").strip()[-800:]
            detail = f"worker exited with code {outcome.exit_code}" + (f": {tail}" if tail else "")
        raise AnalysisError(f"reference analysis failed: {detail}")
    try:
        return ReferenceAnalysis.model_validate(outcome.result)
    except Exception as exc:
        raise AnalysisError(f"reference analysis returned an unreadable result: {exc}") from exc
