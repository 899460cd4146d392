"""The precision ladder: which compute paths a task's tolerance admits, with their error and rate.

A fp32 task checked at 1e-4 does not have to run its dots as IEEE fp32 on CUDA cores: 3xTF32
(`tl.dot(..., input_precision="tf32x3")`, three TF32 tensor-core products per fp32 product) keeps
~fp32 accuracy at several times the rate. Which path passes is a measurement, not a rule, made where the
tolerance is applied: at the problem's output. The analysis worker (which holds torch) runs the whole
reference once in fp64 and once per path with each matmul-like op computed from the path's rounded
operands (`precision_output.measure_output_errors`: an error one GEMM keeps small can be amplified or damped
by what follows); the server (no torch) turns those errors, the policy and this GPU's ceilings
(`hardware.ceiling`, with provenance) into a ladder (`precision_ladder`), a path admissible when its largest
|err| / (atol + rtol*|ref|) at the output is at most 1/SAFETY.

Fallback, said in the ladder's method when used (the whole forward cannot run on the CPU within a bound, or
uses a matmul-like op the emulation does not intercept): a bounded sample of each distinct GEMM of the reference
(ROWS x COLS outputs at the task's full reduction length K, K capped at K_CAP), inputs drawn like
KernelBench's (activations ~ N(0,1), weights ~ U(+-1/sqrt(K)), attention probabilities = softmax
rows); each path rounds its inputs the way Triton's lowering feeds the tensor cores (TF32: the fp32 bits
go to mma.tf32 as they are and the hardware drops the low 13 mantissa bits, i.e. truncation toward zero;
3xTF32, Triton's F32DotTC pass: hi = cvt.rna.tf32(a) (round to nearest, ties away), lo = a - hi, the
three tf32 products lo*hi + hi*lo + hi*hi with lo truncated by the hardware; fp16x3/bf16x3: the same split
with real fp16/bf16 casts, unscaled, so fp16's range and subnormal lo parts show in the error; bf16/fp16/fp8-e4m3:
casts, fp8 with a per-tensor scale), accumulates in fp32, and is compared with the fp32 product computed in
fp64. Truncation is the conservative reading (its error is ~2x round-to-nearest's; on the H200 the
tensor-core TF32 error at K=768 was 4x the round-to-nearest emulation's, see
tests/gpu/test_precision_gpu.py); `TF32_ROUNDING` = "rn" gives the round-to-nearest emulation beside it. A path is
admissible when its worst
error uses at most 1/SAFETY of the policy's atol + rtol*|ref| (margin for the GPU's other
accumulation order and for errors compounding across chained ops).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from egg_mcp.hardware import NO_GPU, Ceiling, GpuSpec, ceiling

PATHS: dict[str, tuple[str, str]] = {
    # path -> (hardware ceiling key, how to get it in Triton)
    "fp32": ("fp32", 'IEEE fp32 FMA: tl.dot(a, b, input_precision="ieee") (CUDA cores)'),
    "tf32x3": ("tf32x3", 'tl.dot(a, b, input_precision="tf32x3") on fp32 inputs (3 TF32 tensor-core products)'),
    "fp16x3": ("fp16x3", "a_hi = a.to(tl.float16); a_lo = (a - a_hi.to(tl.float32)).to(tl.float16), same for b; "
                         "per K step p = tl.dot(a_hi, b_lo); p = tl.dot(a_lo, b_hi, p); p = tl.dot(a_hi, b_hi, p); "
                         "acc += p (not acc = tl.dot(.., acc): the tensor cores' accumulation truncates, 10-50x the "
                         "error at K=4096). Range: |x| < 65504; lo < 6.1e-5 is subnormal (loses bits) unless a, b "
                         "are scaled by 2^k"),
    "bf16x3": ("bf16x3", "as fp16x3 with tl.bfloat16 (fp32's range, ~16 bits): a_hi = a.to(tl.bfloat16); "
                         "a_lo = (a - a_hi.to(tl.float32)).to(tl.bfloat16), same for b; per K step "
                         "p = tl.dot(a_hi, b_lo); p = tl.dot(a_lo, b_hi, p); p = tl.dot(a_hi, b_hi, p); acc += p "
                         "(not acc = tl.dot(.., acc): the tensor cores' accumulation truncates)"),
    "tf32": ("tf32", 'tl.dot(a, b, input_precision="tf32") on fp32 inputs (Triton\'s default)'),
    "bf16": ("bf16", "cast a, b to tl.bfloat16 before tl.dot; accumulate fp32"),
    "fp16": ("fp16", "cast a, b to tl.float16 before tl.dot; accumulate fp32 (only if |values| < 65504: range is not "
                     "emulated)"),
    "fp8": ("fp8", "scale and cast a, b to tl.float8e4nv before tl.dot; accumulate fp32"),
}
"""Compute paths, most exact first (by the error each keeps, not by its rate: fp16x3 and bf16x3 run at their
half type's rate / 3, above 3xTF32's on Hopper). fp16x3 and bf16x3 split each fp32 operand x into hi = half(x) and
lo = half(x - hi), ~22 (fp16) or ~16 (bf16) significant bits, and drop lo*lo; fp16x3's error grows where
|x| is small (lo parts underflow to fp16 subnormals below 6.1e-5) or overflows at 65504."""

FP32_TASK_PATHS = ("fp32", "tf32x3", "fp16x3", "bf16x3", "tf32", "bf16", "fp16", "fp8")
HALF_TASK_PATHS = {"float16": ("fp16", "fp8"), "bfloat16": ("bf16", "fp8")}
RATE_ORDER = ("fp32", "tf32x3", "bf16x3", "fp16x3", "tf32", "bf16", "fp16", "fp8")
"""The usual order of rates, slowest first (H100/H200, A100, L40S datasheets: fp32 < 3xTF32 < bf16x3 = fp16x3 <
TF32 < bf16 = fp16 < fp8; of two equal rates the later is named): how the fastest admissible path is named when
no rate is known. Not the order of PATHS / FP32_TASK_PATHS, which is by exactness."""
RATE_TIE = 0.05
"""Ceilings closer than this are one rate (cuBLAS bf16 vs fp16 on the H200: 788 vs 757 TFLOP/s, while the fp16x3
kernel ran faster than the bf16x3 one, 1.098 vs 1.176 ms): of those, the most exact admissible path is named."""
RTOL_GRID = (0.0, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)
SAFETY = 4.0
ROWS = COLS = 32
K_CAP = 32768
MAX_SHAPES = 4

METHOD = (f"CPU emulation of each path's operand rounding on up to {MAX_SHAPES} of the reference's GEMM shapes alone "
          f"({ROWS}x{COLS} outputs at the task's K, capped at {K_CAP}; activations N(0,1), weights U(+-1/sqrt(K))), "
          "TF32 truncated as mma.tf32 reads it (3xTF32: hi rounded, lo truncated), fp32 accumulation, against the "
          f"fp64 product; admissible when the worst error is <= 1/{SAFETY:g} of atol + rtol*|ref|")


OUTPUT_METHOD = ("judged at the output: the whole reference forward on the CPU in fp64 (the truth) and per path with "
                 "its matmul-like ops from the path's rounded operands, fp32 accumulation; share = |err| / (atol + "
                 f"rtol*|truth|) per output element; admissible when the max share <= 1/{SAFETY:g}")
"""The output method in general; the analysis states its own (sizes used) in `ReferenceAnalysis.precision_method`."""


class PathError(BaseModel):
    """One path's worst error against the fp64 truth: at the problem's output (at="output") or over the sampled
    GEMMs in isolation (at="gemm", the fallback)."""

    path: str
    max_abs: float
    max_rel: float = Field(description="max |err| / max |ref| (over each sampled GEMM, or over the outputs)")
    needed_atol: list[float] = Field(description="per GEMM: per RTOL_GRID entry r, max(|err| - r*|ref|), the atol this "
                                                 "path needs (at the output the frontier says it for any policy)")
    k: list[int] = Field(description="reduction lengths K of the GEMMs measured")
    at: Literal["gemm", "output"] = "gemm"
    frontier: list[tuple[float, float]] = Field(
        default_factory=list, description="at the output: (|err|, |truth|) pairs that bound the max share at any "
                                          "atol, rtol from above (every element is matched by a pair with no smaller "
                                          "err and no larger truth)")
    share_tol: tuple[float, float] | None = Field(default=None, description="(atol, rtol) the shares below were "
                                                                            "computed at")
    max_share_measured: float | None = Field(default=None, description="max |err| / (atol + rtol*|truth|) at share_tol")
    p99_share: float | None = Field(default=None, description="99th percentile of |err| / (atol + rtol*|truth|) at "
                                                              "share_tol")
    mismatched: int = Field(default=0, description="output elements whose non-finite or integer value differs from the "
                                                   "truth")

    def measured_at(self, atol: float, rtol: float) -> bool:
        """Whether the shares were computed at this tolerance (else the max share is the frontier's bound)."""
        return self.share_tol is not None and all(
            abs(x - y) <= 1e-9 * max(abs(x), abs(y), 1e-30) for x, y in zip(self.share_tol, (atol, rtol)))

    def max_share(self, atol: float, rtol: float) -> float:
        """max |err| / (atol + rtol*|truth|) over the outputs (inf when a non-finite or integer output differs):
        measured at share_tol, bounded from above by the frontier at any other tolerance."""
        if self.mismatched:
            return float("inf")
        if self.max_share_measured is not None and self.measured_at(atol, rtol):
            return self.max_share_measured
        shares = [e / (atol + rtol * r) if atol + rtol * r > 0 else (float("inf") if e else 0.0)
                  for e, r in self.frontier]
        return max(shares, default=0.0)


class Rung(BaseModel):
    """One compute path on this GPU at this tolerance."""

    path: str
    how: str
    rate: Ceiling
    max_abs: float | None = None
    max_rel: float | None = None
    share_max: float | None = Field(default=None, description="at the output: max |err| / (atol + rtol*|truth|)")
    share_p99: float | None = None
    admissible: bool
    why: str

    def line(self) -> str:
        if self.max_abs is None:
            err = "error not measured"
        else:
            err = f"err {self.max_abs:.2g} abs, {self.max_rel:.2g} rel"
        if self.rate.value is None:
            rate = self.rate.detail
        else:
            where = {"measured": "measured here", "datasheet": "datasheet lead", "derived": "derived lead"}
            rate = f"{self.rate.value / 1e12:.3g} TFLOP/s, {where.get(self.rate.source, self.rate.source)}"
        verdict = "PASSES" if self.admissible else "fails"
        if self.share_max is not None:  # judged at the output: the share first, the error behind it
            return f"{self.path}: {verdict} at the output ({self.why}; {err}); rate {rate}"
        return f"{self.path}: {verdict} ({err}; {self.why}); rate {rate}"


class PrecisionLadder(BaseModel):
    rungs: list[Rung] = Field(default_factory=list)
    fastest: str = Field(description="the fastest admissible path (its rate decides the floor)")
    method: str = METHOD
    note: str = ""

    def admissible(self) -> list[Rung]:
        return [r for r in self.rungs if r.admissible]

    def lines(self) -> list[str]:
        return [r.line() for r in self.rungs]


def task_paths(dtype: str) -> tuple[str, ...]:
    if dtype in ("float16", "fp16", "half"):
        return HALF_TASK_PATHS["float16"]
    if dtype in ("bfloat16", "bf16"):
        return HALF_TASK_PATHS["bfloat16"]
    return FP32_TASK_PATHS


def _needed(err: list[float], policy_rtol: float) -> float:
    """The grid entry at or below the policy's rtol (conservative: less rtol credit than allowed)."""
    idx = max(i for i, r in enumerate(RTOL_GRID) if r <= policy_rtol + 1e-15)
    return err[idx]


def _pct(share: float) -> str:
    if share == float("inf"):
        return "inf"
    return f"{100 * share:.0f}%" if share >= 0.1 else f"{100 * share:.2g}%"


def _share_text(error: PathError, atol: float, rtol: float) -> str:
    """The output shares in words: max and p99 of the tolerance, or the frontier's bound at another tolerance."""
    if error.mismatched:
        text = f"{error.mismatched} non-finite or integer outputs differ from the truth"
    elif error.measured_at(atol, rtol) or error.share_tol is None:
        text = f"share max {_pct(error.max_share(atol, rtol))}"
        if error.p99_share is not None:
            text += f", p99 {_pct(error.p99_share)}"
    else:
        a, r = error.share_tol
        text = (f"share max <= {_pct(error.max_share(atol, rtol))} (bound; measured at atol={a:g}, rtol={r:g}: "
                f"max {_pct(error.max_share_measured or 0.0)}, p99 {_pct(error.p99_share or 0.0)})")
    return f"{text}, limit {100 / SAFETY:.0f}%"


def admits(error: PathError, atol: float, rtol: float) -> tuple[bool, str]:
    if error.at == "output":
        return error.max_share(atol, rtol) <= 1 / SAFETY, _share_text(error, atol, rtol)
    need = _needed(error.needed_atol, rtol)
    budget = atol / SAFETY
    used = need / atol if atol else float("inf")
    return need <= budget, f"{100 * used:.2g}% of atol (limit {100 / SAFETY:.0f}%)"


def precision_ladder(errors: list[PathError], dtype: str, atol: float, rtol: float,
                     gpu: GpuSpec | None, *, missing: str = NO_GPU, method: str | None = None) -> PrecisionLadder:
    """Pure (server side): the measured errors, the policy and the GPU's ceilings as one ladder.

    Without measured errors (no GEMM in the task, or an old analysis) only the task's own dtype path
    is admissible: nothing is claimed that was not measured. The task's own path is admissible whatever its
    measured share (a candidate cannot be more exact than the reference's precision); a share over the
    limit is said in its line and the note."""
    by_path = {e.path: e for e in errors}
    tight = False
    if method is None:
        method = OUTPUT_METHOD if any(e.at == "output" for e in errors) else METHOD
    paths = task_paths(dtype)
    rungs = []
    for path in paths:
        key, how = PATHS[path]
        rate = ceiling(gpu, key, missing=missing)
        e = by_path.get(path)
        if path == paths[0] and e is None:
            ok, why = True, "the task's own precision"
        elif e is None:
            ok, why = False, "not measured (no GEMM sampled)"
        else:
            ok, why = admits(e, atol, rtol)
            if path == paths[0] and not ok:
                ok, why, tight = True, f"the task's own precision, over the limit: {why}", True
        out = e if e is not None and e.at == "output" else None
        rungs.append(Rung(path=path, how=how, rate=rate, admissible=ok, why=why,
                          max_abs=e.max_abs if e else None, max_rel=e.max_rel if e else None,
                          share_max=out.max_share(atol, rtol) if out is not None else None,
                          share_p99=out.p99_share if out is not None else None))
    top = max((r.rate.value or 0.0 for r in rungs if r.admissible), default=0.0)
    fastest = next((r for r in rungs if r.admissible and (r.rate.value or 0.0) >= top * (1 - RATE_TIE)), rungs[0])
    if all(r.rate.value is None for r in rungs):
        fastest = max((r for r in rungs if r.admissible), key=lambda r: RATE_ORDER.index(r.path), default=rungs[0])
        note = f"no rates ({rungs[0].rate.detail}): the fastest admissible path is named by the usual order of rates"
    else:
        note = ""
    if tight:
        note = (note + "; " if note else "") + (f"even {rungs[0].path} exceeds the limit at the output: accumulation "
                                                "order and the reference's own rounding decide; keep its order")
    return PrecisionLadder(rungs=rungs, fastest=fastest.path, note=note, method=method)


def fastest_path(analysis: Any, tolerance: Any, gpu: GpuSpec | None) -> str | None:
    """The ladder's fastest admissible path for an analysis (None when it holds no measured errors)."""
    errors = getattr(analysis, "precision_errors", None)
    if not errors or tolerance is None:
        return None
    return precision_ladder(errors, analysis.dtype, tolerance.atol, tolerance.rtol, gpu).fastest


# ----------------------------------------------------------------------------------------------
# Worker side (torch)


def gemm_shapes(ops: list[Any]) -> list[tuple[int, int, int, str]]:
    """(M, N, K, kind) of the reference's matmuls, from traced OpInfo entries (distinct, heaviest K first)."""
    out: list[tuple[int, int, int, str]] = []
    for op in ops:
        shapes = [s for s in op.input_shapes if len(s) >= 2]
        name = op.op
        if op.op_class == "attention" and len(shapes) >= 2:
            q, k = shapes[0], shapes[1]
            out.append((q[-2], k[-2], q[-1], "qk"))
            out.append((q[-2], k[-1], k[-2], "pv"))
        elif op.op_class in ("gemm", "batched_gemm") and len(shapes) >= 2:
            a, b = shapes[-2], shapes[-1]
            if "addmm" in name or "baddbmm" in name or len(shapes) == 2:
                out.append((a[-2], b[-1], a[-1], "gemm"))
        elif op.op_class == "convolution" and len(shapes) >= 2:
            w = shapes[1]
            k = 1
            for d in w[1:]:
                k *= d
            out.append((64, w[0], k, "conv"))
    seen, distinct = set(), []
    for m, n, k, kind in sorted(out, key=lambda s: -s[2]):
        if (k, kind) not in seen and k > 0:
            seen.add((k, kind))
            distinct.append((m, n, k, kind))
    return distinct[:MAX_SHAPES]


TF32_ROUNDING = "trunc"
"""How the emulation turns an fp32 operand into what mma.tf32 multiplies: "trunc" (the hardware ignores the
low 13 mantissa bits of the fp32 register Triton hands it: round toward zero; conservative) or "rn"."""


def _tf32(x: Any) -> Any:
    """cvt.rna.tf32.f32: round to nearest (ties away from zero) to 10 mantissa bits."""
    import torch

    i = x.contiguous().view(torch.int32)
    return ((i + 0x1000) & ~0x1FFF).view(torch.float32)


def _tf32_trunc(x: Any) -> Any:
    """What mma.tf32 reads from a raw fp32 register: the low 13 mantissa bits dropped (toward zero)."""
    import torch

    i = x.contiguous().view(torch.int32)
    return (i & ~0x1FFF).view(torch.float32)


def _emulate(product: Any, a: Any, b: Any, path: str, rounding: str | None = None) -> Any:
    """`product(a, b)` (any op linear in each operand: mm, bmm, conv) as `path` computes it: its operands rounded
    the way Triton feeds the tensor cores, fp32 accumulation. a and b are fp32."""
    import torch

    feed = _tf32_trunc if (rounding or TF32_ROUNDING) == "trunc" else _tf32
    if path == "fp32":
        return product(a, b)
    if path == "tf32":
        return product(feed(a), feed(b))
    if path == "tf32x3":  # Triton's F32DotTC: big = cvt.rna(a), small = a - big; small*big + big*small + big*big
        ah, bh = _tf32(a), _tf32(b)
        al, bl = feed(a - ah), feed(b - bh)
        return (product(al, bh) + product(ah, bl)) + product(ah, bh)
    if path in ("fp16x3", "bf16x3"):  # hi = half(a), lo = half(a - hi) (real casts: range, subnormals); lo*lo dropped;
        # the products summed in fp32, as the recipe's per-step `acc += p` does (tests/gpu/test_precision_split_gpu.py)
        dt = torch.float16 if path == "fp16x3" else torch.bfloat16
        ah, bh = a.to(dt), b.to(dt)
        al, bl = (a - ah.float()).to(dt).float(), (b - bh.float()).to(dt).float()
        ah, bh = ah.float(), bh.float()
        return (product(ah, bl) + product(al, bh)) + product(ah, bh)
    if path in ("bf16", "fp16"):
        dt = torch.bfloat16 if path == "bf16" else torch.float16
        return product(a.to(dt).float(), b.to(dt).float())
    if path == "fp8":
        f8 = torch.float8_e4m3fn
        sa, sb = a.abs().max().clamp_min(1e-30) / 448, b.abs().max().clamp_min(1e-30) / 448
        return product((a / sa).to(f8).float(), (b / sb).to(f8).float()) * (sa * sb)
    raise ValueError(f"unknown compute path {path!r}; use one of {', '.join(PATHS)}")


def _path_product(a: Any, b: Any, path: str, rounding: str | None = None) -> Any:
    return _emulate(lambda x, y: x @ y, a, b, path, rounding)


def _operands(m: int, n: int, k: int, kind: str, gen: Any) -> tuple[Any, Any]:
    import torch

    m, n, k = min(m, ROWS), min(n, COLS), min(k, K_CAP)
    if kind == "pv":
        a = torch.softmax(torch.randn(m, k, generator=gen), dim=-1)
        b = torch.randn(k, n, generator=gen)
    elif kind == "qk":
        a = torch.randn(m, k, generator=gen)
        b = torch.randn(k, n, generator=gen) / k ** 0.5
    else:
        a = torch.randn(m, k, generator=gen)
        b = (torch.rand(k, n, generator=gen) * 2 - 1) / k ** 0.5
    return a, b


def measure_path_errors(ops: list[Any], dtype: str, seed: int = 0) -> list[PathError]:
    """Worker side: each path's worst error against fp32 on the reference's own GEMM shapes (bounded cost:
    at most MAX_SHAPES x ROWS x COLS x K_CAP multiply-adds per path)."""
    import torch

    shapes = gemm_shapes(ops)
    if not shapes:
        return []
    gen = torch.Generator().manual_seed(seed)
    acc: dict[str, dict[str, Any]] = {}
    for m, n, k, kind in shapes:
        a, b = _operands(m, n, k, kind, gen)
        if dtype in HALF_TASK_PATHS:  # inputs already rounded to the task dtype: that is the exact reference
            dt = torch.float16 if dtype == "float16" else torch.bfloat16
            a, b = a.to(dt).float(), b.to(dt).float()
        ref = a.double() @ b.double()
        for path in task_paths(dtype):
            if path == "fp8" and not hasattr(torch, "float8_e4m3fn"):
                continue
            err = (_path_product(a, b, path).double() - ref).abs()
            entry = acc.setdefault(path, {"abs": 0.0, "rel": 0.0, "need": [0.0] * len(RTOL_GRID), "k": []})
            entry["abs"] = max(entry["abs"], float(err.max()))
            entry["rel"] = max(entry["rel"], float(err.max() / ref.abs().max().clamp_min(1e-30)))
            for i, r in enumerate(RTOL_GRID):
                entry["need"][i] = max(entry["need"][i], float((err - r * ref.abs()).clamp_min(0).max()))
            entry["k"].append(min(k, K_CAP))
    return [PathError(path=p, max_abs=v["abs"], max_rel=v["rel"], needed_atol=v["need"], k=v["k"])
            for p, v in acc.items()]


def gemm_fallback(ops: list[Any], dtype: str, why: str) -> tuple[list[PathError], str]:
    """The per-GEMM measurement and its method, for when the judgement cannot be made at the output (`why`)."""
    errors = measure_path_errors(ops, dtype)
    return errors, (f"per GEMM, not at the output ({why}): {METHOD}" if errors else "")
