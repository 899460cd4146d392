"""Classifying one aten op: its op class, the attributes the cost model reads (dims, kernel size, ...)
and the FLOPs charged for ops the torch flop counter ignores (pure; no torch import)."""

from __future__ import annotations

import math
from typing import Any

from egg_mcp.analysis.analysis_types import OP_CLASSES, OpClass

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


def classify_op(func: Any, tensor_inputs: list[Any], outputs: list[Any]) -> OpClass:
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
