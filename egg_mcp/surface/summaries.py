"""The text form of each tool result: a short summary an LLM can act on (~1.5 KB at most).

The full result travels beside it as structuredContent (MCP: structured content plus a text
form); long parts (briefs, sources, diffs, per-kernel metrics) are named with where to read them:
the structured field, an `egg://` resource or a prompt.
"""

from __future__ import annotations

from typing import Any

from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel

MAX_TEXT = 1500
"""Bytes of one result's text block; the test of the context budget holds it."""


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4g} ms"


def _x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def _clip(text: str | None, n: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _brief_pointer(task_id: str, role: str, stage: str, text: str) -> str:
    if not text:
        return ""
    prompt = f"{stage.lower()}_{role}"
    return (f"brief ({len(text)} chars): structuredContent.brief, resource egg://tasks/{task_id}/brief/{role}, "
            f"or prompt {prompt} with task_id")


def _lines(*parts: str) -> str:
    return "\n".join(p for p in parts if p)


def start_task(r) -> str:
    analysis = (r.analysis or {}).get("summary") if r.analysis else None
    sizes = r.options.size_overrides
    return _lines(
        f"task {r.task_id} ({r.problem}, {r.origin}); stage {r.stage}; dtype {r.options.dtype}, tolerance "
        f"{r.options.tolerance.name} (atol={r.options.tolerance.atol:g}, rtol={r.options.tolerance.rtol:g})",
        f"timing: {'GPU ' + (r.options.gpu_name or '') if r.timing_available else 'no GPU (Triton CPU interpreter, correctness only)'}"
        + (f"; evaluated at sizes {sizes}" if sizes else ""),
        f"analysis: {_clip(analysis, 400)}" if analysis else "analysis: none",
        *(f"note: {_clip(n, 250)}" for n in r.notes[:3]),
        _brief_pointer(r.task_id, "code", r.stage, r.brief),
        f"next: {r.next_step}",
    )


def generate_seeds(r) -> str:
    paradigms = [p.get("name") or p.get("title") or "" for p in (r.seed_plan.get("paradigms") or [])][:8]
    base = r.baselines
    if base and (base.eager or base.compiled):
        b = (f"baselines: eager {_ms(base.eager.median_ms if base.eager else None)}, torch.compile "
             f"{_ms(base.compiled.median_ms if base.compiled else None)}")
    else:
        b = f"baselines: {_clip(base.unavailable_reason if base else 'not measured', 160)}"
    return _lines(
        f"task {r.task_id}, stage {r.stage}: write {r.k} structurally different seeds",
        ("paradigms: " + "; ".join(_clip(p, 90) for p in paradigms if p)) if paradigms else "",
        b,
        f"brief ({len(r.brief)} chars, the rules and paradigms): structuredContent.brief, or prompt seeds_code "
        f"with task_id; structured form in seed_plan",
        f"next: {r.next_step}",
    )


def verify(r) -> str:
    res = r.result
    parts = [f"candidate {r.candidate_id} (task {r.task_id}, stage {r.stage}): {r.verdict}"
             + (" [cached: this exact source was verified before]" if r.cached else "")]
    parts.append(f"summary: {_clip(r.summary, 420)}")
    if r.sandbox:
        parts.append(_clip(r.sandbox, 300))
    if r.time_ms is not None:
        iso = res.timing.isolated.median_ms if res.timing and res.timing.isolated else None
        cv = res.timing.cv if res.timing else None
        parts.append(f"time {_ms(r.time_ms)} (steady-state median"
                     + (f", cv {cv:.2%}" if cv is not None else "") + ")"
                     + (f"; isolated {_ms(iso)} (clean L2 per call)" if iso is not None else "")
                     + f"; vs eager {_x(r.speedup_vs_eager)}, vs torch.compile {_x(r.speedup_vs_compile)}, "
                     f"vs committed {_x(r.speedup_vs_committed)}" + ("; best in stage" if r.best_in_stage else ""))
    elif r.verdict == "correct":
        parts.append(f"timing: {_clip(res.timing_unavailable_reason or 'none', 160)}")
    sizes = (res.options.size_overrides if res.options else None) or {}
    if sizes:
        parts.append(f"evaluated at sizes {sizes}")
    m = res.mismatch
    if m is not None:
        parts.append(f"mismatch: output {m.output_index}, {m.fraction_mismatched or 0:.2%} off, max abs "
                     f"{m.max_abs_error if m.max_abs_error is not None else 'n/a'}, non-finite {m.nonfinite_count or 0}, "
                     f"first bad {m.first_bad_indices[:3]}; hint: {_clip(m.hint, 220)}")
    e = res.error
    if e is not None:
        parts.append(f"error: {e.kind}: {_clip(e.message, 260)}"
                     + (f" (candidate line {e.candidate_line})" if e.candidate_line else ""))
    bad = [f for f in res.integrity if f.severity == "violation"]
    if bad:
        parts.append("integrity: " + "; ".join(_clip(f"{f.check}: {f.detail}", 150) for f in bad[:2]))
    if r.debug_brief:
        parts.append(f"debug brief ({len(r.debug_brief)} chars): structuredContent.debug_brief or resource "
                     f"egg://tasks/{r.task_id}/brief/debug")
    parts.append(f"full result: structuredContent.result or egg://tasks/{r.task_id}/candidates/{r.candidate_id}/result")
    parts.append(f"next: {r.next_step}")
    return _lines(*parts)


def profile_ncu(r) -> str:
    rep = r.report
    lines = [f"profile {r.report_id} of {r.candidate_id} ({rep.source}, stage {rep.stage}): {_clip(rep.summary, 300)}"]
    roof = rep.roofline if isinstance(rep.roofline, str) or rep.roofline is None else rep.roofline.summary
    if roof:
        lines.append(f"roofline: {_clip(roof, 240)}")
    for k in rep.kernels[:3]:
        bound, headline = (k.bound, k.headline) if hasattr(k, "bound") else (k.classification.bound,
                                                                              k.classification.headline)
        moves = "; ".join(_clip(m, 90) for m in k.next_moves[:2])
        lines.append(f"- {_clip(k.name, 50)}: {_ms(k.duration_ms)}, {bound}: "
                     f"{_clip(headline, 160)}" + (f"; next: {moves}" if moves else ""))
    if len(rep.kernels) > 3:
        lines.append(f"({len(rep.kernels) - 3} more kernels in structuredContent.report.kernels)")
    for w in rep.warnings[:2]:
        lines.append(f"warning: {_clip(w, 220)}")
    lines.append(f"full report: egg://tasks/{r.task_id}/reports/{r.report_id} (metric table: .../raw); "
                 f"Profile brief: egg://tasks/{r.task_id}/brief/profile")
    return _lines(*lines)


def propose_tiling(r) -> str:
    p = r.proposal
    lines = [f"tiling {r.report_id} of {r.candidate_id}: {p.kind} {p.dims} on {p.gpu}; {p.feasible_count} feasible "
             f"of {p.enumerated} enumerated ({p.pruned_count} pruned); measured: {p.measured}"]
    if p.kernels:
        lines.append("kernels (each priced at its own launch): " + "; ".join(
            f"{k.kernel} {k.kind} {k.dims} {k.precision or ''}".rstrip() for k in p.kernels[:4]))
    if p.rank_correlation is not None:
        lines.append(f"model vs measured rank correlation (Spearman): {p.rank_correlation:.2f} over "
                     f"{p.rank_correlation_n} configs")
    if p.note:
        lines.append(f"note: {_clip(p.note, 300)}")
    for c in p.ranked[:3]:
        lines.append(f"#{c.rank} {c.config.values}: predicted {_ms(c.predicted_ms)}, measured {_ms(c.measured_ms)}"
                     + (f", {_clip(c.error, 80)}" if c.error else ""))
    if p.recommended:
        lines.append(f"recommended {p.recommended.values}: {_clip(p.recommended_reason, 200)}"
                     + ("; source in structuredContent.proposal.recommended_source" if p.recommended_source else ""))
    for w in p.warnings[:2]:
        lines.append(f"warning: {_clip(w, 200)}")
    lines.append(f"next: {r.next_step}")
    return _lines(*lines)


def commit_stage(r) -> str:
    c = r.committed
    return _lines(
        f"committed {c.stage}: candidate {c.candidate_id}, {_ms(c.time_ms)}, vs eager {_x(c.speedup_vs_eager)}, "
        f"vs torch.compile {_x(c.speedup_vs_compile)}; guard: {_clip(c.guard, 200)}",
        f"now in stage {r.new_stage} (task {r.task_id})",
        *([_clip(r.memcheck.line(), 240)] if getattr(r, "memcheck", None) is not None else []),
        *(f"warning: {_clip(w, 220)}" for w in r.warnings[:3]),
        _brief_pointer(r.task_id, "code", r.new_stage, r.brief),
        f"handoff context: structuredContent.context or egg://tasks/{r.task_id}/context",
        f"next: {r.next_step}",
    )


def task_status(r) -> str:
    hist = [f"  {h.stage}: {h.candidate_id} {_ms(h.time_ms)} ({_x(h.speedup_vs_eager)} vs eager) "
            f"{_clip(h.decision.summary, 80)}" for h in r.history[-5:]]
    cands = [f"{c.candidate_id} {c.verdict or c.status} {_ms(c.time_ms)}" for c in r.candidates_in_stage[-6:]]
    return _lines(
        f"task {r.task_id} ({r.problem}): stage {r.stage}; eager {_ms(r.eager_ms)}, torch.compile {_ms(r.compile_ms)}",
        "history:" if hist else "history: nothing committed yet", *hist,
        (f"candidates in stage ({len(r.candidates_in_stage)}): " + "; ".join(cands)) if cands else "",
        f"running jobs {r.running_jobs}; reports {len(r.reports)}",
        f"tools now: {', '.join(r.allowed_tools)}",
        f"next: {r.next_step}",
    )


def list_tasks(r) -> str:
    rows = [f"{t.task_id} {t.problem} {t.stage} best {_ms(t.best_time_ms)}" for t in r.tasks[:12]]
    more = f"(+{len(r.tasks) - 12} more in structuredContent.tasks)" if len(r.tasks) > 12 else ""
    return _lines(f"{len(r.tasks)} task(s) in {r.workspace}", *rows, more)


def get_context(r) -> str:
    dec = [f"  {d.stage}: {_clip(d.decision.summary, 100)}" for d in r.decisions[-5:]]
    return _lines(
        f"task {r.task_id} ({r.problem}) stage {r.stage}: {r.stage_goal}",
        f"dtype {r.dtype}, tolerance {r.tolerance.name}; floor {_ms(r.floor_ms)}, eager {_ms(r.eager_ms)}, "
        f"torch.compile {_ms(r.compile_ms)}; GPU {r.gpu or 'none'}",
        f"analysis: {_clip(r.analysis_summary, 300)}" if r.analysis_summary else "",
        (f"committed kernel: {r.committed_candidate_id} ({_ms(r.committed_time_ms)}); source "
         f"({len(r.committed_source or '')} chars): structuredContent.committed_source or "
         f"egg://tasks/{r.task_id}/candidates/{r.committed_candidate_id}/source")
        if r.committed_candidate_id else "committed kernel: none yet",
        "decisions:" if dec else "", *dec,
    )


def get_candidate(r) -> str:
    c = r.candidate
    res = r.result
    return _lines(
        f"candidate {c.candidate_id} (task {r.task_id}, stage {c.stage}): {c.verdict or c.status}, {_ms(c.time_ms)}"
        + (f"; note: {_clip(c.note, 120)}" if c.note else ""),
        f"summary: {_clip(res.summary, 400)}" if res else "",
        f"source ({len(r.source)} chars): structuredContent.source or "
        f"egg://tasks/{r.task_id}/candidates/{c.candidate_id}/source; full result: structuredContent.result",
    )


def export_kernel(r) -> str:
    return (f"exported task {r.task_id}'s {r.stage} kernel (candidate {r.candidate_id}) to {r.path}; "
            f"source ({len(r.source)} chars) in structuredContent.source")


def compare(r) -> str:
    diff = r.diff or "(identical sources)"
    head = _lines(
        f"compare {r.candidate_a} (A) vs {r.candidate_b} (B), task {r.task_id}: {r.verdict}"
        + (f", confidence {r.confidence:.1%}" if r.confidence is not None else ""),
        f"{_clip(r.summary, 400)}",
        f"diff ({r.diff_lines_changed} lines changed, full in structuredContent.diff):",
    )
    room = MAX_TEXT - len(head.encode()) - 40
    body = diff if len(diff.encode()) <= room else diff.encode()[:room].decode(errors="ignore") + "\n… (truncated)"
    return head + "\n" + body


_BY_TOOL = {
    "start_task": start_task, "generate_seeds": generate_seeds, "verify": verify, "profile_ncu": profile_ncu,
    "propose_tiling": propose_tiling, "commit_stage": commit_stage, "task_status": task_status,
    "list_tasks": list_tasks, "get_context": get_context, "get_candidate": get_candidate,
    "export_kernel": export_kernel, "compare": compare,
}


def summary_text(tool: str, result: BaseModel, lead: str | None = None) -> str:
    """The result's text block, clipped to MAX_TEXT bytes; `lead` (the weak sandbox level an operator allowed)
    comes first and is never clipped away."""
    fn = _BY_TOOL.get(tool)
    text = fn(result) if fn else _clip(result.model_dump_json(), MAX_TEXT)
    if lead:
        text = f"{_clip(lead, 400)}\n{text}"
    raw = text.encode()
    if len(raw) > MAX_TEXT:
        text = raw[: MAX_TEXT - 40].decode(errors="ignore") + "\n… (full result in structuredContent)"
    return text


def tool_result(tool: str, result: BaseModel, lead: str | None = None) -> CallToolResult:
    """structuredContent: the whole model; content: its summary (after `lead`, if any)."""
    data: dict[str, Any] = result.model_dump(mode="json", by_alias=True)
    return CallToolResult(content=[TextContent(type="text", text=summary_text(tool, result, lead))],
                          structured_content=data)
