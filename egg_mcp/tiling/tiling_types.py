"""Pydantic models of the tiling search: what crosses from the space reader to the cost model, the
measuring worker and the client."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from egg_mcp.contract import KernelInfo

ParamRole = Literal["block", "warps", "stages", "group", "split", "other"]
ParamSource = Literal["module_constant", "tuning_space", "autotune", "launch_keyword", "constexpr", "inferred"]
KernelKind = Literal["gemm", "reduction", "elementwise", "softmax", "norm", "attention"]
KERNEL_KINDS: tuple[str, ...] = ("gemm", "reduction", "elementwise", "softmax", "norm", "attention")


class TunableParam(BaseModel):
    """One knob of the candidate, where it lives in the source and which values are worth trying."""

    name: str
    role: ParamRole
    current: int | None = Field(default=None, description="value in the source now (None: not set in the source)")
    choices: list[int] = Field(default_factory=list, description="values the search may try")
    sources: list[ParamSource] = Field(default_factory=list, description="where the parameter was found")
    choices_from: Literal["declared", "autotune", "inferred", "current"] = "current"
    axis: str | None = Field(default=None, description="problem dimension this block tiles (e.g. 'M', 'n_cols')")
    applicable: bool = Field(default=True, description="apply_config can rewrite it in the source")
    kernels: list[str] = Field(default_factory=list, description="kernels taking it as a tl.constexpr")
    line: int | None = None
    note: str = ""


class KernelFacts(BaseModel):
    """Structure of one @triton.jit kernel that the cost model needs."""

    name: str
    constexprs: list[str] = Field(default_factory=list)
    has_loop: bool = False
    uses_dot: bool = False
    ieee_dot: bool = Field(default=False, description="tl.dot(..., input_precision='ieee'): no TF32 for fp32 inputs")
    tl_calls: list[str] = Field(default_factory=list, description="tl.* functions it calls")
    autotuned: bool = False
    line: int | None = None
    dot_precision: str | None = Field(default=None, description="input_precision of its tl.dot calls (None: Triton's "
                                                                "default)")
    n_dots: int = 0
    bindings: dict[str, str] = Field(
        default_factory=dict, description="constexpr / launch option (num_warps, num_stages) -> the parameter that "
                                          "sets it at this kernel's launch sites")
    launch_sites: int = 0
    persistent: bool = Field(default=False, description="its programs loop over the tiles: the grid's size is its own")


class KernelCall(BaseModel):
    """One launch of one kernel as the cost model sees it: its own kind, dims and parameters."""

    kernel: str
    kind: str
    dims: dict[str, int]
    params: dict[str, str] = Field(default_factory=dict, description="name the kernel sees -> parameter of the space")
    fixed: dict[str, int] = Field(default_factory=dict, description="values set at the launch that are not tunable")
    precision: str | None = None
    dims_from: str = Field(default="task", description="'launch' (read from the probe of this launch) or 'task'")
    grid: list[int] = Field(default_factory=list, description="the grid the probe saw it launched with")
    axes: dict[str, str] = Field(default_factory=dict,
                                 description="block the kernel sees -> the dim its grid shows it tiles")


class CandidateSpace(BaseModel):
    """Everything `space.extract_space` read from a candidate source (never executed)."""

    params: list[TunableParam]
    kernels: list[KernelFacts]
    derived: dict[str, str] = Field(
        default_factory=dict, description="constexprs set at launch from an expression: name -> expression"
    )
    warnings: list[str] = Field(default_factory=list)
    calls: list[KernelCall] = Field(default_factory=list, description="per launch: kernel, kind, dims (kernels.py)")
    excluded: dict[str, str] = Field(default_factory=dict, description="values found but not tunable, and why: "
                                                                       "never rewritten")

    def param(self, name: str) -> TunableParam | None:
        return next((p for p in self.params if p.name == name), None)


class TilingConfig(BaseModel):
    """One point of the space: parameter name -> value."""

    values: dict[str, int]

    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.values.items())


class ConfigEstimate(BaseModel):
    """The analytic verdict on one config."""

    config: TilingConfig
    feasible: bool
    rules: list[str] = Field(default_factory=list, description="ids of the pruning rules that fired")
    reasons: list[str] = Field(default_factory=list, description="each fired rule, in words")
    predicted_ms: float | None = None
    score: float = Field(default=0.0, description="best predicted time / this predicted time (1.0 = best)")
    smem_bytes: int = 0
    regs_per_thread: int = 0
    ctas_per_sm: int = 0
    occupancy: float = Field(default=0.0, description="resident warps / max warps per SM")
    grid: list[int] = Field(default_factory=list)
    waves: float = 0.0
    tail_waste: float = Field(default=0.0, description="fraction of launched lanes masked off")
    intensity: float = Field(default=0.0, description="FLOP per byte loaded, per tile")
    notes: list[str] = Field(default_factory=list)


class MeasuredConfig(BaseModel):
    """One config compiled, checked and timed on the GPU (or the CPU interpreter)."""

    config: TilingConfig
    median_ms: float | None = None
    correct: bool | None = None
    error_kind: Literal["compile_error", "out_of_resources", "incorrect", "runtime_error", "timeout",
                        "timed_output", "not_measured"] | None = Field(
        default=None, description="'not_measured': picked, but the budget ran out before it was compiled or timed")
    error: str | None = None
    max_abs_error: float | None = None
    kernels: list[KernelInfo] = Field(default_factory=list)
    timing_method: str | None = None
    timing_cv: float | None = Field(default=None, description="coefficient of variation of the timed runs (GPU only)")
    timing_runs: int | None = Field(default=None, description="timed runs behind median_ms")
    sm_clock_mhz: int | None = Field(default=None, description="lowest SM clock NVML read around the timed runs")
    throttle_reasons: list[str] = Field(default_factory=list, description="NVML throttle reasons around the runs")


class PrunedGroup(BaseModel):
    rule: str
    count: int
    example: str


class KernelSummary(BaseModel):
    """What the model took each launched kernel to be (told apart: own dims, kind, launch, precision)."""

    kernel: str
    kind: str
    dims: dict[str, int]
    dims_from: str
    precision: str | None = None
    parameters: dict[str, str] = Field(default_factory=dict)


class RankedConfig(BaseModel):
    rank: int
    config: TilingConfig
    predicted_ms: float | None
    measured_ms: float | None = None
    correct: bool | None = None
    error: str | None = None
    smem_bytes: int = 0
    regs_per_thread: int = 0
    waves: float = 0.0
    notes: list[str] = Field(default_factory=list)


class Reverification(BaseModel):
    """The measured winner and the current source run again through verify's path before anything is said."""

    config: TilingConfig
    verdict: str | None = Field(default=None, description="verify's verdict on the winner's source")
    current_verdict: str | None = Field(default=None, description="verify's verdict on the current source")
    winner_ms: float | None = Field(default=None, description="verify's time of the winner's source")
    current_ms: float | None = Field(default=None, description="verify's time of the current source")
    confirmed: bool = Field(default=False, description="correct and faster than the current source beyond noise: "
                                                       "only then is it recommended")
    summary: str = ""


class TilingProposal(BaseModel):
    kind: str
    dims: dict[str, int]
    gpu: str
    dtype: str
    parameters: list[TunableParam]
    space_size: int = Field(description="size of the full cartesian space")
    enumerated: int
    truncated: bool = False
    feasible_count: int
    pruned_count: int
    pruned: list[PrunedGroup] = Field(default_factory=list)
    ranked: list[RankedConfig] = Field(default_factory=list)
    recommended: TilingConfig | None = None
    recommended_source: str | None = Field(default=None,
                                           description="the candidate with the recommended config applied")
    recommended_reason: str = ""
    measured: bool = False
    note: str = ""
    trials_used: int = 0
    kernels: list[KernelSummary] = Field(default_factory=list, description="one per launch the model priced")
    rank_correlation: float | None = Field(
        default=None, description="Spearman rho of predicted vs measured time over the measured correct configs (>= 3)")
    rank_correlation_n: int = 0
    wall_s: float = 0.0
    not_measured: list[TilingConfig] = Field(
        default_factory=list, description="configs picked to measure that the budget left unmeasured (not in "
                                          "`ranked` as measured, not counted in trials_used)")
    stopped_by: str = Field(default="", description="what ended the measuring: 'max_trials', 'budget', 'space' "
                                                    "(every feasible config measured) or 'failed'")
    time_s: dict[str, float] = Field(
        default_factory=dict, description="where the time went: budget, probe (launch probe), model (space and "
        "ranking), start (worker start-up), compile, measure (checking and timing), job_other, return, verify "
        "(re-verifying the winner), total, left (budget - total)")
    reverified: Reverification | None = Field(default=None, description="the winner re-run through verify")
    excluded: dict[str, str] = Field(default_factory=dict, description="values found but never rewritten, and why")
    model_constants: str = Field(default="", description="whose time constants priced the ranking: measured on this "
                                                         "GPU by calibrate, or the H200's fit")
    warnings: list[str] = Field(default_factory=list)
