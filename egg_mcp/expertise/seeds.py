"""The seed brief: k structurally different algorithms for this problem, and how seeds are judged.

Paradigms come from `paradigms.PARADIGMS` for the problem's heaviest op class, ranked by the
problem's shapes (rows vs SMs, row length vs registers, GEMM tiles vs SMs), so the client writes
seeds that explore structure where it matters. Pure and torch-free: runs in the server process.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, Field

from egg_mcp.analysis.analysis_types import OpInfo, ReferenceAnalysis, RooflineFloor
from egg_mcp.analysis.precision import precision_ladder
from egg_mcp.analysis.roofline import admissible_compute_type, fmt_bytes, fmt_ms, fmt_shape, fmt_tol, roofline_floor
from egg_mcp.contract import BaselineResult, EvalOptions, TolerancePolicy
from egg_mcp.expertise.paradigms import FUSION_SCOPES, PARADIGMS, Paradigm
from egg_mcp.hardware import NO_GPU, GpuSpec

"""TF32 dot products err ~1e-3 relative (10-bit mantissa): fails a 1e-4 check."""

TILE = 128
"""Reference output tile edge for tile-count estimates (a common GEMM tile)."""

SPLIT_ROW_MIN_LENGTH = 8192
"""Below this row length a split-row seed only adds a launch: the problem is launch-bound anyway."""

ROW_IN_REGISTERS_MAX_BYTES = 64 * 1024
"""Largest row one program keeps in registers without spilling (16K fp32 with num_warps=16)."""


class SeedChoice(BaseModel):
    name: str
    op_class: str
    structure: str
    why_here: str = Field(description="what in this problem's shapes makes it a contender (or a risk)")
    risks: str
    triton_hints: str


class SeedBrief(BaseModel):
    problem: str
    k: int
    paradigms: list[SeedChoice]
    fusion_opportunities: list[str]
    precision_notes: list[str]
    contract: list[str]
    judging: list[str]
    floor: RooflineFloor | None = Field(description="None without GPU ceilings (the brief says why)")
    brief_markdown: str


CONTRACT: list[str] = [
    "Return one complete Python module per seed defining `class ModelNew(nn.Module)` with the same "
    "`__init__` and `forward` signatures as the reference `Model` (same parameters, same init order: "
    "weights are created under the same seed and must match).",
    "All compute runs in `@triton.jit` kernels. torch is allowed only for allocation (torch.empty/zeros), "
    "views/strides/reshape, launching and glue.",
    "No torch compute ops (matmul, softmax, F.*, torch.sum, ...) and no calls to the reference Model: "
    "the verifier records every aten compute op the candidate runs and flags them.",
    "No caching of outputs across calls, no side streams, no monkeypatching: integrity checks reject them.",
    "Triton APIs stable across 3.x only (tl.dot, tl.load/store, tl.program_id, tl.associative_scan, "
    "tl.atomic_*).",
]


def installed_triton() -> str:
    """The Triton version installed here (package metadata: no import of triton in the server)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"Triton {version('triton')} is installed here"
    except PackageNotFoundError:
        return "no Triton is installed here"


def contract() -> list[str]:
    return CONTRACT[:-1] + [CONTRACT[-1][:-1] + f"; {installed_triton()}."]


def _main_op(analysis: ReferenceAnalysis, op_class: str) -> OpInfo | None:
    """The most expensive op of a class (by FLOPs, then bytes)."""
    ops = [op for op in analysis.ops if op.op_class == op_class]
    if op_class == "attention" and not ops:
        ops = [op for op in analysis.ops if op.op_class == "batched_gemm"]
    if not ops:
        return None
    return max(ops, key=lambda o: (o.flops * o.count, o.bytes * o.count))


def _rows_and_length(op: OpInfo) -> tuple[int, int] | None:
    """(independent rows, reduced length) of a row-wise op."""
    if not op.input_shapes:
        return None
    shape = op.input_shapes[0]
    numel = math.prod(shape) if shape else 1
    dims = op.attrs.get("dim")
    if op.attrs.get("normalized_shape"):
        length = math.prod(op.attrs["normalized_shape"])
    elif op.attrs.get("per_channel_over"):
        length = math.prod(shape[d] for d in op.attrs["per_channel_over"] if d < len(shape))
    elif op.attrs.get("groups") and len(shape) >= 2:
        length = numel // (shape[0] * op.attrs["groups"])
    elif dims:
        length = math.prod(shape[d] for d in dims if d < len(shape))
    else:
        length = shape[-1] if shape else 1
    length = max(1, length)
    return numel // length, length


def _elt_bytes(dtype: str) -> int:
    return 2 if dtype in ("float16", "bfloat16") else 4


NOMINAL_SMS = 100
"""SM count the paradigm scores assume when there is no GPU (said so in the brief, never a real GPU's)."""


def _why(p: Paradigm, analysis: ReferenceAnalysis, gpu: GpuSpec | None, dtype: str) -> tuple[float, str]:
    """Score (higher = try first) and the shape fact that justifies it."""
    score, fact = _why_on(p, analysis, gpu.sm_count if gpu is not None else NOMINAL_SMS, dtype)
    if gpu is None and "SMs" in fact:
        fact += f" (no GPU: a nominal {NOMINAL_SMS}-SM device)"
    return score, fact


def _why_on(p: Paradigm, analysis: ReferenceAnalysis, sms: int, dtype: str) -> tuple[float, str]:
    """(score, the fact and reason) for paradigm `p` on this problem's main op of its class."""
    op = _main_op(analysis, p.op_class)
    name = p.key.split(".", 1)[1]
    if op is None:
        return 0.0, p.wins_when
    if p.op_class in ("reduction", "softmax", "normalization", "scan"):
        return _why_on_rows(p, op, name, sms, dtype)
    if p.op_class in ("gemm", "batched_gemm", "attention"):
        return _why_on_gemm(p, op, name, sms, dtype)
    if p.op_class == "convolution":
        return _why_on_convolution(p, op, name, sms, dtype)
    if p.op_class == "pooling":
        return _why_on_pooling(p, op, name, sms, dtype)
    return _why_on_elementwise(p, op, name, sms, dtype)


def _why_on_rows(p: Paradigm, op: OpInfo, name: str, sms: int, dtype: str) -> tuple[float, str]:
    """Reductions, softmax, norms, scans: rows that fit registers or not, enough rows to fill the SMs or not."""
    rl = _rows_and_length(op)
    if rl is None:
        return 0.0, p.wins_when
    rows, length = rl
    row_bytes = length * _elt_bytes(dtype)
    fits = row_bytes <= ROW_IN_REGISTERS_MAX_BYTES
    # splitting a row only pays when the rows cannot fill the SMs AND each row is long enough
    # that one program would stream it for longer than a launch (~3 us) costs
    few_rows = rows < 2 * sms and length >= SPLIT_ROW_MIN_LENGTH
    strided_stats = "batch_norm" in op.op and op.input_shapes[0][0] > 1  # instance norm: [1, N*C, H, W]
    fact = f"{rows} rows of {length} ({fmt_bytes(row_bytes)} per row; {sms} SMs)"
    table = {
        "row_in_registers": (3 if fits else 0.5, "row fits registers" if fits else "row too long for registers"),
        "associative_scan_in_registers": (2.5 if fits else 0.5, "row fits registers" if fits else "row too long"),
        "online_looped": (2.5 if not fits else 1.5, "streams rows of any length"),
        "looped_row": (2.5 if not fits else 1.5, "streams rows of any length"),
        "blocked_scan_with_carry": (3, "streams rows of any length"),
        "row_per_program": (3 if not few_rows else 1, "enough rows to fill the SMs" if not few_rows
                            else "too few rows to fill the SMs alone"),
        "multi_row_tile": (2.5 if length < 1024
                           or "dim" in op.attrs and op.attrs["dim"] != [len(op.input_shapes[0]) - 1]
                           else 1.2, "short or strided rows"),
        "split_row_two_pass": (3.5 if few_rows else 1.3, "few rows: split each row across SMs" if few_rows
                               else "rows already fill the SMs; splitting adds a pass"),
        "split_row_partials": (3.5 if few_rows else 1.3, "few rows: split each row across SMs" if few_rows
                               else "rows already fill the SMs; splitting adds a pass"),
        "reduce_then_scan": (3.5 if few_rows else 1.0, "few long rows: parallel over chunks" if few_rows
                             else "rows already fill the SMs"),
        "atomics": (2 if few_rows else 0.8, "one launch for few outputs" if few_rows else "atomic order varies"),
        "channel_stats_then_apply": (3.5 if strided_stats else 0.8, "per-channel statistics over N*H*W"
                                     if strided_stats else "each normalised row is contiguous"),
    }
    score, reason = table.get(name, (1.0, p.wins_when))
    return score, f"{fact}: {reason}"


def _why_on_gemm(p: Paradigm, op: OpInfo, name: str, sms: int, dtype: str) -> tuple[float, str]:
    """GEMMs and attention: tiles and waves on the SMs."""
    M, N, K = op.attrs.get("M", 0), op.attrs.get("N", 0), op.attrs.get("K", 0)
    batch = op.attrs.get("batch", 1)
    tiles = math.ceil(M / TILE) * math.ceil(N / TILE) * batch if M and N else 0
    waves = tiles / sms if tiles else 0
    fact = (f"M={M} N={N} K={K}" + (f" batch={batch}" if batch > 1 else "")
            + f": {tiles} tiles of {TILE}x{TILE} = {waves:.2f} waves on {sms} SMs")
    tail = waves % 1
    table = {
        "tiled_grouped": (3, "many tiles: L2 reuse from grouped order" if waves >= 1 else "few tiles"),
        "split_k": (3.5 if waves < 1 and K >= 4 * max(M, N, 1) else (2.2 if waves < 1 else 0.9),
                    "fewer tiles than SMs: split K to fill them" if waves < 1 else "tiles already fill the SMs"),
        "persistent": (2.5 if 1 <= waves and 0 < tail < 0.5 else 1.8,
                       f"last wave {tail:.0%} full: persistent programs remove the tail" if waves >= 1
                       else "few tiles"),
        "batch_in_grid": (3, "batch as a grid axis"),
        "flatten_batch": (1.5, "only if B is shared across the batch"),
        "persistent_batched": (2 if tiles < 2 * sms else 1.4, "small per-batch problems"),
        "flash_online_softmax": (3.5, "never materialises the scores"),
        "split_kv": (2.5 if M and M <= 128 else 1.5, "short query length" if M and M <= 128 else "long queries"),
        "three_kernels": (1.0, "simple baseline"),
    }
    score, reason = table.get(name, (1.0, p.wins_when))
    return score, f"{fact}: {reason}"


def _why_on_convolution(p: Paradigm, op: OpInfo, name: str, sms: int, dtype: str) -> tuple[float, str]:
    """Convolutions: depthwise, 1x1, or an implicit GEMM's K."""
    shapes = op.input_shapes
    groups = op.attrs.get("groups", 1)
    kernel = op.attrs.get("kernel", [])
    cin = shapes[0][1] if shapes and len(shapes[0]) > 1 else 0
    depthwise = groups > 1 and groups == cin
    one_by_one = bool(kernel) and all(k == 1 for k in kernel)
    gemm_k = (cin // max(groups, 1)) * math.prod(kernel or [1])
    fact = f"Cin={cin} groups={groups} kernel={fmt_shape(kernel)}: implicit-GEMM K={gemm_k}"
    table = {
        "implicit_gemm": (0.8 if depthwise else 3.5, "depthwise: K too small for tensor cores" if depthwise
                          else "K large enough for tensor cores"),
        "direct": (3.5 if depthwise or gemm_k < 32 else 1.5, "depthwise/small K" if depthwise or gemm_k < 32
                   else "CUDA-core FMAs lose on dense convs"),
        "im2col_then_gemm": (3 if one_by_one else 2, "1x1: im2col is a view" if one_by_one
                             else "robust seed; R*S-fold patch traffic"),
    }
    score, reason = table.get(name, (1.0, p.wins_when))
    return score, f"{fact}: {reason}"


def _why_on_pooling(p: Paradigm, op: OpInfo, name: str, sms: int, dtype: str) -> tuple[float, str]:
    """Pooling: windows, or adaptive/global pooling as a reduction."""
    adaptive = "adaptive" in op.op
    table = {
        "window_per_output": (3 if not adaptive else 1, "simple, coalesced"),
        "row_tile_reuse": (2.5 if not adaptive else 0.5, "overlapping windows reuse loads"),
        "reduction_per_plane": (3.5 if adaptive else 1, "adaptive/global pooling is a reduction"),
    }
    score, reason = table.get(name, (1.0, p.wins_when))
    return score, f"{op.op} on {fmt_shape(op.input_shapes[0])}: {reason}"


def _why_on_elementwise(p: Paradigm, op: OpInfo, name: str, sms: int, dtype: str) -> tuple[float, str]:
    """Elementwise and broadcast: output elements per SM."""
    numel = math.prod(op.output_shape) if op.output_shape else 0
    fact = f"{numel} output elements ({numel / (1024 * sms):.1f} blocks of 1024 per SM)"
    base = {"flat_1d_fused": 3, "tiled_2d_broadcast": 3.2 if p.op_class == "broadcast" else 2,
            "persistent_grid_stride": 2.2 if numel > 64 * 1024 * sms else 1.2}.get(name, 1.5)
    return base, f"{fact}: {p.wins_when}"


HEAVY_SHARE = 0.10
"""An op class with at least this share of the task's FLOPs is a heavy op: it gets its own paradigm."""


def heavy_classes(analysis: ReferenceAnalysis) -> list[tuple[str, float]]:
    """(op class, FLOP share) of the classes that carry >= HEAVY_SHARE of the FLOPs, in `op_classes` order
    (only when more than one class is heavy: a single-class task needs no coverage rule)."""
    total = sum(op.flops * op.count for op in analysis.ops) or 0
    if not total:
        return []
    share: dict[str, float] = {}
    for op in analysis.ops:
        share[op.op_class] = share.get(op.op_class, 0.0) + op.flops * op.count / total
    order = [c for c in analysis.op_classes if share.get(c, 0.0) >= HEAVY_SHARE and c in PARADIGMS]
    return [(c, share[c]) for c in order] if len(order) > 1 else []


def choose_paradigms(analysis: ReferenceAnalysis, k: int, gpu: GpuSpec | None, dtype: str) -> list[SeedChoice]:
    """k structurally distinct paradigms: the primary class first (ranked by shape), then the
    algorithm-defining secondary classes, then fusion-scope alternatives for multi-op chains."""
    if k < 1:
        raise ValueError("k must be at least 1")
    classes = analysis.op_classes or ["elementwise"]
    primary = classes[0]
    if primary == "attention" and "attention" not in PARADIGMS:  # pragma: no cover - catalogue has it
        primary = "batched_gemm"
    ranked: list[tuple[float, Paradigm, str]] = []
    for tier, cls in enumerate(classes):
        if tier > 0 and cls in ("elementwise", "broadcast", "batched_gemm", "softmax") and primary == "attention":
            continue
        if tier > 0 and cls in ("elementwise", "broadcast"):
            continue  # fused into the primary's prologue/epilogue, not a seed structure of its own
        for p in PARADIGMS.get(cls, ()):
            score, why = _why(p, analysis, gpu, dtype)
            ranked.append((score - 10 * tier, p, why))
    ranked.sort(key=lambda t: -t[0])
    # every heavy op of the chain gets a paradigm before a second one of the same class (issue 18: an
    # attention block's projections are GEMMs too, often most of its FLOPs)
    picked: list[tuple[float, Paradigm, str]] = []
    for cls, share in heavy_classes(analysis):
        best = next((t for t in ranked if t[1].op_class == cls), None)
        if best is not None and len(picked) < k:
            picked.append((best[0], best[1], f"{best[2]}; {cls} ops are {100 * share:.0f}% of the FLOPs"))
    for t in ranked:
        if len(picked) >= k:
            break
        if all(t[1] is not p for _, p, _ in picked):
            picked.append(t)
    if len(picked) < k and analysis.fusible_chains:
        for fp in FUSION_SCOPES:
            picked.append((0.0, fp, fp.wins_when))
            if len(picked) == k:
                break
    return [
        SeedChoice(name=p.name, op_class=p.op_class, structure=p.structure, why_here=why, risks=p.risks,
                   triton_hints=p.triton_hints)
        for _, p, why in picked
    ]


def fusion_opportunities(analysis: ReferenceAnalysis) -> list[str]:
    out = []
    for ch in analysis.fusible_chains:
        names = []
        for i in ch.op_indices:
            op = analysis.ops[i]
            names.append(op.op.replace("aten.", "") + (f" x{op.count}" if op.count > 1 else ""))
        out.append(f"fuse {' -> '.join(names)} (saves {fmt_bytes(ch.saved_bytes)} of DRAM traffic): {ch.reason}")
    return out


def precision_notes(analysis: ReferenceAnalysis, tolerance: TolerancePolicy, dtype: str,
                    gpu: GpuSpec | None) -> list[str]:
    """The precision ladder in words: which compute paths pass this tolerance at this task's output (or per
    GEMM where the analysis says why not), what each runs at on this GPU (with provenance), what the fastest buys."""
    compute = admissible_compute_type(dtype, tolerance, analysis.precision_errors, gpu)
    has_dots = bool(analysis.tensor_core_flops)
    head = (f"Task dtype {dtype}, tolerance policy {tolerance.name} (atol={fmt_tol(tolerance.atol)}, "
            f"rtol={fmt_tol(tolerance.rtol)})")
    notes = [f"{head}: the fastest admissible compute path for dots is {compute}." if has_dots
             else f"{head}: no dots in this problem, so no tensor-core precision path applies."]
    if has_dots and analysis.precision_errors:
        ladder = precision_ladder(analysis.precision_errors, dtype, tolerance.atol, tolerance.rtol, gpu,
                                  missing=analysis.floor_unavailable or NO_GPU,
                                  method=analysis.precision_method or None)
        notes.append("Precision ladder (" + ladder.method + "):")
        notes += [f"  {line}" for line in ladder.lines()]
        best = next(r for r in ladder.rungs if r.path == ladder.fastest)
        notes.append(f"Use {best.path}: {best.how}.")
        base = ladder.rungs[0]
        if best.path != base.path and best.rate.value and base.rate.value and gpu is not None:
            fast = roofline_floor(analysis.flops, analysis.tensor_core_flops, analysis.min_bytes, gpu, best.path)
            slow = roofline_floor(analysis.flops, analysis.tensor_core_flops, analysis.min_bytes, gpu, base.path)
            notes.append(f"{best.path} runs dots at {best.rate.value / base.rate.value:.2g}x the {base.path} rate: "
                         f"floor {fmt_ms(fast.floor_ms)} vs {fmt_ms(slow.floor_ms)} with {base.path} dots.")
        if ladder.note:
            notes.append(ladder.note)
    elif dtype == "float32" and has_dots:
        notes.append(f"No measured precision ladder for this analysis: {compute} is the policy's rule "
                     "(3xTF32 keeps ~fp32 error; TF32 errs ~1e-3 at K~1000).")
    elif dtype == "float32":
        notes.append("Accumulate in fp32; at 1e-4 reassociated sums are fine but atomics' varying order on long "
                     "rows can fail; prefer deterministic reductions.")
    else:
        notes.append(f"Load and store {dtype}; accumulate in fp32 (tl.dot accumulates fp32; cast reductions with "
                     ".to(tl.float32)); cast once at the store. The CPU interpreter cannot run bf16: quick checks "
                     "there use float32.")
    return notes


def judging_rules(tolerance: TolerancePolicy, baselines: BaselineResult | None, trials: int) -> list[str]:
    rules = [
        f"Correctness: {trials} trials on fresh random inputs (seeds the candidate cannot know), each output "
        f"compared at atol={fmt_tol(tolerance.atol)}, rtol={fmt_tol(tolerance.rtol)} ({tolerance.name}); one failure "
        "fails the seed.",
        "Integrity: torch compute ops, calls to the reference, cached outputs or side streams are violations.",
        "Speed: verify's timing.median_ms, the steady state: the median over many calls (under 200 us: calls "
        "back to back in a CUDA graph over rotating inputs; longer kernels: each call timed with events after an "
        "L2 read-flush). timing.isolated is a second reading, each call from a clean L2 (what ncu reports). The "
        "fastest correct seed by median_ms is committed with commit_stage; compare A/B settles close calls.",
    ]
    if baselines is not None and (baselines.eager or baselines.compiled):
        eager = fmt_ms(baselines.eager.median_ms) if baselines.eager else "unknown"
        compiled = fmt_ms(baselines.compiled.median_ms) if baselines.compiled else "unknown"
        rules.append(f"Baselines to beat: PyTorch eager {eager}, torch.compile {compiled}.")
    else:
        rules.append("Baselines (eager, torch.compile) need a GPU: speedups are reported when one is present.")
    return rules


def _render(brief: SeedBrief, analysis: ReferenceAnalysis, baselines: BaselineResult | None) -> str:
    lines = [f"# Seeds brief: {brief.k} structurally different seeds", "", f"**Problem.** {brief.problem}"]
    if analysis.problem_doc:
        lines.append(f"Reference: {analysis.problem_doc}")
    floor = brief.floor
    if floor is None:
        bound = f"**Floor.** none: {analysis.floor_unavailable or NO_GPU}."
    else:
        bound = (f"**Floor.** {fmt_ms(floor.floor_ms)} on {floor.gpu_name} ({floor.compute_type}, {floor.bound}-bound: "
                 f"compute {fmt_ms(floor.compute_ms)}, memory {fmt_ms(floor.memory_ms)}; "
                 f"ceilings {floor.spec_source}).")
    if floor is not None and baselines is not None and baselines.eager:
        bound += (f" Eager {fmt_ms(baselines.eager.median_ms)} = "
                  f"{baselines.eager.median_ms / floor.floor_ms:.1f}x the floor.")
    lines += ["", bound, "", "## Paradigms (one seed each; differ in structure, not constants)"]
    for i, p in enumerate(brief.paradigms, 1):
        lines += [
            f"{i}. **{p.name}** [{p.op_class}] — {p.structure}.",
            f"   - Here: {p.why_here}. Risks: {p.risks}.",
            f"   - Triton: `{p.triton_hints}`",
        ]
    if brief.fusion_opportunities:
        lines += ["", "## Fusion (every seed should fuse these)"] + [f"- {f}" for f in brief.fusion_opportunities]
    lines += ["", "## Precision"] + [f"- {n}" for n in brief.precision_notes]
    lines += ["", "## Contract"] + [f"- {c}" for c in brief.contract]
    lines += ["", "## Judging"] + [f"- {j}" for j in brief.judging]
    lines += ["", "Next: write the k seeds, `verify` each, then `commit_stage` the fastest correct one with a "
              "decision JSON {\"summary\", \"changes\", \"rationale\", \"evidence\"}."]
    return "\n".join(lines) + "\n"


def build_seed_brief(
    analysis: ReferenceAnalysis,
    *,
    k: int,
    tolerance: TolerancePolicy,
    dtype: str,
    gpu: GpuSpec | None,
    baselines: BaselineResult | None = None,
) -> SeedBrief:
    """The SEEDS-stage brief: paradigms, fusion, precision, contract and judging for this problem."""
    from egg_mcp.analysis.roofline import current_floor

    floor = current_floor(analysis, gpu, tolerance)  # the floor verify and profile_ncu hold times to
    trials = EvalOptions.model_fields["correctness_trials"].default
    brief = SeedBrief(
        problem=analysis.summary,
        k=k,
        paradigms=choose_paradigms(analysis, k, gpu, dtype),
        fusion_opportunities=fusion_opportunities(analysis),
        precision_notes=precision_notes(analysis, tolerance, dtype, gpu),
        contract=contract(),
        judging=judging_rules(tolerance, baselines, trials),
        floor=floor,
        brief_markdown="",
    )
    if len(brief.paradigms) < k:
        brief.judging.append(
            f"Only {len(brief.paradigms)} structurally distinct paradigms apply here; make the remaining "
            f"{k - len(brief.paradigms)} seed(s) differ in fusion scope or dataflow, not only in constants."
        )
    brief.brief_markdown = _render(brief, analysis, baselines)
    return brief
