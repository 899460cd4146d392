"""What the reference analysis hands to the rest of the server (and, serialised, to the client).

Every field here ends up in a client's context window, so the models stay small: repeated
operators are collapsed into one entry with a `count`, shapes are plain int lists, and anything
that is not needed to choose an algorithm or judge a speedup is left out.

FLOP convention (so hand-checks are possible): GEMM / convolution / attention FLOPs come from
`torch.utils.flop_counter` (2 per multiply-add); every other op is charged a small fixed number of
FLOPs per element (see `egg_mcp.analysis.op_classes.FLOPS_PER_ELEMENT`). Only the first kind can
run on tensor cores, which is why `tensor_core_flops` is kept apart.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, Field

from egg_mcp.analysis.precision import PathError

OpClass = Literal[
    "elementwise",
    "broadcast",
    "reduction",
    "normalization",
    "softmax",
    "gemm",
    "batched_gemm",
    "convolution",
    "pooling",
    "attention",
    "scan",
    "gather_scatter",
    "other",
]

OP_CLASSES: tuple[str, ...] = tuple(c for c in get_args(OpClass) if c != "other")
"""The vocabulary that selects seed paradigms. Ops outside it (tensor creation, copies of
metadata) are classed "other" and never select a paradigm."""


class OpInfo(BaseModel):
    """One aten operator of the reference forward (or `count` identical ones in a row)."""

    op: str = Field(description="aten op, e.g. 'aten.addmm'")
    op_class: OpClass
    input_shapes: list[list[int]] = Field(default_factory=list, description="tensor inputs only")
    output_shape: list[int] = Field(default_factory=list, description="first tensor output")
    dtype: str = Field(description="dtype of the first tensor output, e.g. 'float32'")
    flops: int = Field(default=0, description="per call")
    bytes: int = Field(default=0, description="tensor inputs read + outputs written, per call (unfused traffic)")
    attrs: dict[str, Any] = Field(
        default_factory=dict, description="what selects an algorithm: dim, kernel_size, stride, padding, groups..."
    )
    count: int = Field(default=1, description="identical consecutive calls collapsed into this entry")


class FusibleChain(BaseModel):
    """Ops (indices into `ReferenceAnalysis.ops`) that one kernel can compute without writing the
    intermediates to DRAM."""

    op_indices: list[int]
    reason: str
    saved_bytes: int = Field(default=0, description="intermediate DRAM traffic a fused kernel avoids")


class RooflineFloor(BaseModel):
    """No kernel can beat this on `gpu_name`: max(compute time, minimum-bytes time)."""

    gpu_name: str
    compute_type: str = Field(description="peak used for tensor-core-eligible FLOPs: fp32 (IEEE), tf32, fp16, bf16")
    floor_ms: float
    bound: Literal["memory", "compute"]
    compute_ms: float
    memory_ms: float
    spec_source: str = Field(description="where the GPU ceilings come from: 'measured: ...' (on this GPU, with when "
                                         "and how) or 'datasheet: ...' (leads), per ceiling")
    ceilings: str = Field(default="", description="the two ceilings in short, each with its source: measured by "
                                                  "egg-mcp calibrate here (when), derived, or a datasheet lead")

    def basis(self) -> str:
        """What set this floor and where its ceilings come from: the checks a below-floor flag names."""
        what = ("the minimum bytes at the DRAM rate: check them, and the DRAM ceiling" if self.bound == "memory"
                else f"the FLOPs at the {self.compute_type} rate: check them, the ceiling, and whether the kernel "
                     "computes in a faster path than that")
        return f"set by {what} ({self.spec_source or 'ceilings of unknown origin'})"


class ReferenceAnalysis(BaseModel):
    """The exact workload of the reference: what to fuse, which algorithms apply, how fast is possible."""

    summary: str = Field(description="one line for the client")
    problem_doc: str = Field(default="", description="first line of the reference Model's docstring")
    ops: list[OpInfo] = Field(default_factory=list)
    fusible_chains: list[FusibleChain] = Field(default_factory=list)
    op_classes: list[str] = Field(default_factory=list, description="subset of OP_CLASSES, heaviest first")
    flops: int = 0
    tensor_core_flops: int = Field(default=0, description="GEMM / conv / attention FLOPs (tensor-core eligible)")
    min_bytes: int = Field(default=0, description="inputs read once + outputs written once + parameters once")
    unfused_bytes: int = Field(default=0, description="DRAM traffic of the eager op sequence (every op reads and "
                                                      "writes)")
    arithmetic_intensity: float = Field(default=0.0, description="flops / min_bytes")
    input_shapes: list[list[int]] = Field(default_factory=list)
    input_dtypes: list[str] = Field(default_factory=list)
    output_shapes: list[list[int]] = Field(default_factory=list)
    param_count: int = 0
    param_bytes: int = Field(default=0, description="parameters and buffers")
    dtype: str = "float32"
    floor: RooflineFloor | None = Field(default=None, description="None without ceilings: see floor_unavailable")
    floor_unavailable: str | None = Field(default=None, description="why there is no floor: 'no GPU' or 'unknown GPU "
                                                                    "...'")
    floors_ms: dict[str, float] = Field(
        default_factory=dict, description="floor under each compute type this dtype could use (e.g. fp32 vs tf32)"
    )
    precision_errors: list[PathError] = Field(
        default_factory=list, description="per compute path, its error against the fp64 truth at the reference's "
                                          "output, or per GEMM where that could not run (analysis.precision.PathError; "
                                          "the ladder is built from them)")
    precision_method: str = Field(default="", description="how precision_errors were measured: sizes used, or why per "
                                                          "GEMM")
    size_overrides: dict[str, int | list[int]] = Field(default_factory=dict)
    traced_on: str = Field(default="meta", description="meta (shapes only), cuda or cpu")
    notes: list[str] = Field(default_factory=list)

    def op_counts(self) -> dict[str, int]:
        """How many calls of each op class the forward makes (collapsed entries expanded)."""
        counts: dict[str, int] = {}
        for op in self.ops:
            counts[op.op_class] = counts.get(op.op_class, 0) + op.count
        return counts
