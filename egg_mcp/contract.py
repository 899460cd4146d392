"""The contract between the workflow and the evaluation engine.

Everything that measures (verify, baselines, reference analysis, profiling targets, tiling trials)
runs LLM-written or user-written code, so it all goes through `Evaluator`, which runs it in worker
processes and returns these models. Field names here are relied on by the workflow, the profiler,
the tiling search and the reports: extend, do not rename.
"""

from __future__ import annotations

import math
from typing import Any, Awaitable, Callable, Literal, Protocol

from pydantic import BaseModel, Field, model_validator

Verdict = Literal[
    "correct",
    "incorrect",
    "compile_error",
    "runtime_error",
    "timeout",
    "oom",
    "integrity_violation",
    "interrupted",
    "memory_error",
]
"""What happened to a candidate. Only `correct` may be committed. `memory_error`: the kernel wrote
outside its tensors (guarded allocations in the runner, or compute-sanitizer memcheck on the GPU)."""

Fault = Literal["candidate", "harness", "reference"]
"""Whose fault a failed verdict is: the candidate's code, egg-mcp's own harness/environment (not the
kernel: never cached, fix the install), or the problem's reference module."""

DType = Literal["float32", "float16", "bfloat16"]

ProgressFn = Callable[[float, float | None, str | None], Awaitable[None]]
"""async progress(done, total, message) — forwarded to MCP progress notifications."""


class TolerancePolicy(BaseModel):
    """A named correctness policy; recorded in every result so speedups are never compared across
    policies by accident."""

    name: str = Field(description="'kernelbench-v0.1' (strict), 'kernelbench-v0' (1e-2) or 'custom'")
    atol: float
    rtol: float


STRICT_FP32 = TolerancePolicy(name="kernelbench-v0.1", atol=1e-4, rtol=1e-4)
STRICT_HALF = TolerancePolicy(name="kernelbench-v0.1", atol=1e-2, rtol=1e-2)
LOOSE = TolerancePolicy(name="kernelbench-v0", atol=1e-2, rtol=1e-2)


def default_tolerance(dtype: DType, preset: str = "kernelbench-v0.1") -> TolerancePolicy:
    if preset == "kernelbench-v0":
        return LOOSE
    if preset != "kernelbench-v0.1":
        raise ValueError(f"unknown tolerance preset {preset!r}; use 'kernelbench-v0.1' or 'kernelbench-v0'")
    return STRICT_FP32 if dtype == "float32" else STRICT_HALF


class EvalOptions(BaseModel):
    """How to evaluate one candidate (or one reference)."""

    dtype: DType = "float32"
    tolerance: TolerancePolicy = Field(
        default=STRICT_FP32, description="when not given: KernelBench v0.1's tolerance for `dtype` (fp32 1e-4, "
                                         "fp16/bf16 1e-2)"
    )
    correctness_trials: int = Field(default=5, ge=1, le=100)
    timing: bool = True
    """Time the candidate (and only when correct). Ignored without a GPU: timing is then reported
    as unavailable, never made up."""
    timing_trials: int | None = Field(default=None, ge=1, le=10000, description="None: adapt to kernel length")
    isolated_timing: bool = Field(
        default=False, description="also time the candidate's kernels per call from a clean, cold L2 (ncu's condition)")
    size_overrides: dict[str, int | list[int]] = Field(
        default_factory=dict,
        description="module-level size constants of the problem to override (quick check, CPU interpreter)",
    )
    device: Literal["auto", "cuda", "interpreter"] = "auto"
    compile_timeout_s: float = 120.0
    run_timeout_s: float = 300.0
    check_integrity: bool = True
    roofline_floor_ms: float | None = Field(
        default=None, description="physical floor of the reference on this GPU; a faster candidate is flagged for "
                                  "review"
    )
    roofline_floor_path: str | None = Field(default=None, description="the compute path the floor assumes (the fastest "
                                                                      "the "
                                            "precision ladder admits), named in the flag")
    roofline_floor_basis: str | None = Field(default=None, description="what set the floor and where its ceilings come "
                                                                       "from "
                                             "(measured here or a datasheet lead), said in the flag")
    baseline_ms: float | None = Field(
        default=None,
        description="eager reference time on this device (from `baselines`); None: the engine times the reference "
        "itself in the same job. A candidate more than 10x faster is flagged for review",
    )

    @model_validator(mode="before")
    @classmethod
    def _tolerance_follows_dtype(cls, data: Any) -> Any:
        """EvalOptions(dtype="bfloat16") must not silently keep the fp32 tolerance (1e-4 fails every
        correct bf16 kernel on rounding alone)."""
        if isinstance(data, dict) and data.get("tolerance") is None and data.get("dtype") in ("float16", "bfloat16"):
            data = {**data, "tolerance": default_tolerance(data["dtype"])}
        return data


class MismatchReport(BaseModel):
    """What the Debug role needs to localise a wrong result."""

    output_index: int = Field(default=0, description="top-level position of the bad part (its key's position for a "
                                                     "dict)")
    path: str | None = Field(default=None, description="the first bad part in KernelBench-ish notation: output, "
                             "output[1][0], output['h']")
    expected_shape: list[int] | None = None
    got_shape: list[int] | None = None
    expected_dtype: str | None = None
    got_dtype: str | None = None
    max_abs_error: float | None = None
    mean_abs_error: float | None = None
    max_rel_error: float | None = None
    fraction_mismatched: float | None = None
    nonfinite_count: int | None = None
    first_bad_indices: list[list[int]] = Field(default_factory=list)
    trial: int | None = None
    hint: str = ""


class ErrorShare(BaseModel):
    """How close a correct candidate came to the tolerance: |got - e| / (atol + rtol*|e|) per element (1.0 is the
    limit), the worst over the correctness trials and every floating output."""

    max_share: float = Field(description="the largest element's error as a share of its tolerance (1.0 = at the limit)")
    p99_share: float = Field(description="the 99th percentile over elements (from up to 2^20 evenly spaced ones)")
    path: str = Field(default="output", description="the output part where max_share was seen")
    trials: int = 0


class ErrorReport(BaseModel):
    """A failure with the traceback trimmed to the lines of the candidate that matter."""

    kind: str = Field(description="exception type, or 'timeout' / 'signal' / 'exit'")
    message: str
    candidate_line: int | None = Field(default=None, description="1-based line in the submitted source")
    traceback: str = ""


SE_MEDIAN = 1.2533
"""Standard error of a median = 1.2533 x sigma / sqrt(n) (normal samples)."""


def median_standard_error(cv: float, n: int) -> float:
    """The relative standard error of a median of `n` runs whose spread is `cv` (n >= 1): what the regression
    guard (workflow/commit.py) and propose_tiling's recommendation (tiling/recommend.py) build their noise bands on."""
    return SE_MEDIAN * cv / math.sqrt(n)


class TimingStats(BaseModel):
    median_ms: float
    mean_ms: float | None = None
    min_ms: float | None = None
    iqr_ms: float | None = None
    cv: float | None = Field(default=None, description="coefficient of variation of the timed runs")
    n_runs: int = 0
    method: Literal["cuda_graph", "cuda_events"] = "cuda_events"
    l2_flushed: bool = True
    input_sets: int = 1
    host_wall_ms: float | None = Field(default=None, description="host clock over the timed region (cross-check)")
    estimate_ms: float | None = Field(default=None, description="the call's GPU time (launch gaps hidden), which picks "
                                                                "the "
                                      "method (a CUDA graph below timing.GRAPH_BELOW_MS)")
    graph_fallback: str | None = Field(default=None, description="why a call short enough for a CUDA graph was timed "
                                                                 "by "
                                       "events instead (the capture's error)")
    remeasured: int = Field(default=0, description="readings taken again because they showed an outside disturbance "
                            "(timing.disturbed: a steady middle, a slow tail); this one is the steadiest")
    disturbed_cvs: list[float] | None = Field(default=None, description="the CVs of the readings that were discarded")
    sm_clock_mhz: int | None = None
    throttled: bool | None = None
    throttle_reasons: list[str] = Field(default_factory=list)
    isolated: IsolatedTiming | None = Field(
        default=None, description="only with EvalOptions.isolated_timing: the ncu-comparable per-call kernel time")
    isolated_error: str | None = Field(default=None, description="why the isolated timing was requested but not taken")


class IsolatedTiming(BaseModel):
    """Per-call GPU kernel time with every call started from a clean, cold L2 (read flush before each call),
    from the GPU's own kernel start/end timestamps (CUPTI through torch.profiler): the condition Nsight
    Compute's gpu__time_duration measures. `median_ms` above is the steady state instead (calls back to back,
    each paying the write-back of the previous call's output), which is what the kernel costs inside a model."""

    median_ms: float
    cv: float
    calls: int
    per_kernel_ms: dict[str, float] = Field(default_factory=dict, description="median per call, by kernel name")
    method: str = "cupti kernel timestamps, clean cold L2 per call"


class IntegrityFinding(BaseModel):
    check: str = Field(
        description="torch_compute | no_triton_kernel | reference_model | side_stream | output_cache | "
        "monkeypatch | output_alias | tensor_subclass | input_mutation | beyond_floor | implausible_speedup | "
        "host_compute (tensor data read on the host inside forward) | native_code (ctypes, cffi, a compiler or "
        "other process, a foreign extension) | dispatch_escape (the op checks or the profiler switched off, "
        "exec/compile of source, the reference's file read, harness frames introspected) | "
        "runner_protocol (the runner sent data the harness never writes) | timing_forged (the runner's timing "
        "disagrees with the judge's clock)"
    )
    severity: Literal["violation", "review"]
    detail: str


class KernelInfo(BaseModel):
    """One Triton kernel the candidate launched, with the compiler's resource report."""

    name: str
    launches_per_forward: float = 0
    num_warps: int | None = None
    num_stages: int | None = None
    registers: int | None = None
    spills: int | None = None
    shared_mem_bytes: int | None = None
    grid: list[int] | None = None
    constexprs: dict[str, Any] = Field(default_factory=dict)


class EnvInfo(BaseModel):
    device: str
    interpreter: bool
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    triton: str | None = None
    python: str | None = None


class Placement(BaseModel):
    """Where a job ran: which host, which GPU (index on that host, model), through which lane
    (`egg_mcp.cluster`: a local lane per GPU, or a Ray node's lane). Set by a `LanePool`; None from a bare engine."""

    host: str
    device_index: int | None = Field(default=None, description="GPU index on that host (None: no GPU, CPU interpreter)")
    device_model: str = Field(description="GPU model ('NVIDIA H200'), or 'cpu-interpreter'")
    lane: str = Field(description="the lane's name, e.g. 'local/gpu0' or 'ray/<node>/gpu1'")
    via: Literal["local", "ray"] = "local"
    attempts: int = Field(default=1, description="2 when the first lane was lost mid-job and the job ran again "
                                                 "elsewhere")
    note: str | None = None

    def label(self) -> str:
        where = f"gpu{self.device_index}" if self.device_index is not None else "cpu"
        retry = f", attempt {self.attempts}" if self.attempts > 1 else ""
        return f"{self.host} {where} ({self.device_model}) via {self.via} lane {self.lane}{retry}"


class EvalResult(BaseModel):
    verdict: Verdict
    summary: str = Field(description="one sentence for the client: what happened and what to do next")
    correctness_trials: int = 0
    correctness_trials_passed: int = 0
    mismatch: MismatchReport | None = None
    error_share: ErrorShare | None = Field(
        default=None, description="correct: the worst error as a share of the tolerance (max and p99), so 33 % of it "
                                  "does not "
        "read like 0.001 %")
    error: ErrorReport | None = None
    timing: TimingStats | None = None
    timing_unavailable_reason: str | None = None
    integrity: list[IntegrityFinding] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description="how the outputs were compared where that differs "
                             "from the plain tolerance (e.g. a scaled atol where it would pass an all-zeros output)")
    kernels: list[KernelInfo] = Field(default_factory=list)
    torch_ops: list[str] = Field(default_factory=list, description="aten compute ops the candidate ran")
    stdout_tail: str = ""
    stderr_tail: str = ""
    env: EnvInfo | None = None
    wall_s: float = 0.0
    options: EvalOptions | None = None
    reference_timing: TimingStats | None = Field(
        default=None, description="the reference (eager PyTorch) timed in the same job, same method, when no "
                                  "baseline_ms"
    )
    speedup: float | None = Field(default=None, description="reference_timing.median_ms / timing.median_ms")
    phase_s: dict[str, float] = Field(
        default_factory=dict, description="seconds per phase inside the judge (runner start, import, trials, ...)"
    )
    server_phase_s: dict[str, float] = Field(
        default_factory=dict, description="seconds per phase in the server: queue_wait, worker_take, job (the "
        "judge's phase_s plus messaging), teardown; they add up to the call's wall time in the engine")
    fault: Fault = Field(default="candidate", description="'harness': egg-mcp or its environment failed, not your "
                                                          "kernel")
    sandbox: dict[str, Any] | None = Field(
        default=None, description="the sandbox in force for the candidate's runner (egg_mcp.sandbox's report)")
    judge: dict[str, Any] | None = Field(
        default=None, description="which judge decided: its pid and job number, persistent or one-shot, whether the "
        "reference was loaded or held from an earlier verify, and whether its timing was measured or held")
    placement: Placement | None = Field(default=None, description="where the job ran (host, GPU index, model, lane)")


class BaselineResult(BaseModel):
    """The reference timed as PyTorch eager and as torch.compile, once per task and device."""

    eager: TimingStats | None = None
    compiled: TimingStats | None = None
    compile_error: str | None = None
    unavailable_reason: str | None = None
    env: EnvInfo | None = None
    placement: Placement | None = None


class JobOutcome(BaseModel):
    """Raw outcome of one isolated worker job (see `Evaluator.run_job`)."""

    ok: bool
    result: dict[str, Any] | None = None
    error: ErrorReport | None = None
    timed_out: bool = False
    exit_code: int | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""
    wall_s: float = 0.0
    sandbox: dict[str, Any] | None = Field(default=None, description="what confined the job's process (said before its "
                                           "code ran); None for a judge job, which confines its runner instead")
    placement: Placement | None = None


class Evaluator(Protocol):
    """What the workflow, profiler and tiling search need from the engine."""

    async def evaluate(
        self,
        reference_source: str,
        candidate_source: str,
        options: EvalOptions,
        progress: ProgressFn | None = None,
    ) -> EvalResult: ...

    async def baselines(
        self, reference_source: str, options: EvalOptions, progress: ProgressFn | None = None
    ) -> BaselineResult: ...

    async def run_job(
        self,
        target: str,
        payload: dict[str, Any],
        *,
        timeout_s: float,
        uses_gpu: bool,
        wrapper_argv: list[str] | None = None,
    ) -> JobOutcome:
        """Run trusted function `target` ("egg_mcp.pkg.module:function", taking the payload dict and
        returning a JSON-able dict) in an isolated worker process. `uses_gpu` jobs are serialised per
        device with every other GPU job so timings never overlap. `wrapper_argv` prefixes the worker
        command (e.g. `ncu --csv ... --`): such a job always gets a fresh process, never a pooled one."""
        ...

    def has_gpu(self) -> bool: ...
