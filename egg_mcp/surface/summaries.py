"""The text form of each tool result: a short summary an LLM can act on (~1.5 KB at most), then, for the
tools whose value is guidance, the guidance itself (≤ 4 KB).

Many clients hand the model only a result's text content, so the briefs travel there: start_task's and
commit_stage's Code brief for the stage, generate_seeds' rules and paradigms, verify's Debug brief when a
candidate failed (profile_ncu's findings are its summary). The full result travels beside the text as
structuredContent (MCP: structured content plus a text form); other long parts (sources, diffs, per-kernel
metrics) are named with where to read them: the structured field, an `egg://` resource or a prompt.
"""

from __future__ import annotations

import re
from typing import Any

from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel

MAX_TEXT = 1500
"""Bytes of one result's summary (the text before the guidance); the test of the context budget holds it."""
MAX_BRIEF = 4096
"""Bytes of the guidance block in the text (a brief compacted); the test of the context budget holds it."""
BRIEF_MARK = "\n\n=== "
"""Where the guidance block starts in a text content (a client or test can split there)."""


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
    return f"brief: below; also structuredContent.brief and resource egg://tasks/{task_id}/brief/{role}"


_COMMENT = re.compile(r"<!--.*?-->", re.S)


def compact_brief(text: str, where: str, limit: int = MAX_BRIEF) -> str:
    """The brief as guidance for the text block: comments and trailing spaces dropped, blank runs collapsed; a
    brief over `limit` bytes is cut at a line, saying where the whole one is (the budget test keeps the briefs
    of the workflow under the limit, so the cut is a guard, not the plan)."""
    lines = [line.rstrip() for line in _COMMENT.sub("", text).strip().splitlines()]
    out: list[str] = []
    for line in lines:
        if line or (out and out[-1]):
            out.append(line)
    body = "\n".join(out)
    if len(body.encode()) <= limit:
        return body
    tail = f"\n… (cut at {limit} bytes; the whole brief: {where})"
    room = limit - len(tail.encode())
    cut = body.encode()[:room].decode(errors="ignore")
    return cut[: cut.rfind("\n")] + tail if "\n" in cut else cut + tail


def _guidance(tool: str, result: Any) -> tuple[str, str, str] | None:
    """(title, brief, where the whole one is) for the tools whose value is guidance, else None."""
    tid = getattr(result, "task_id", "")
    if tool == "start_task" and result.brief:
        return f"{result.stage} · Code brief", result.brief, f"egg://tasks/{tid}/brief/code"
    if tool == "generate_seeds" and result.brief:
        return "Seeds: rules and paradigms", result.brief, "structuredContent.brief"
    if tool == "commit_stage" and result.brief:
        return f"{result.new_stage} · Code brief", result.brief, f"egg://tasks/{tid}/brief/code"
    if tool == "verify" and result.debug_brief and result.verdict != "correct":
        return "Debug brief", result.debug_brief, f"egg://tasks/{tid}/brief/debug"
    return None


def _lines(*parts: str) -> str:
    return "\n".join(p for p in parts if p)


def start_task(r) -> str:
    analysis = (r.analysis or {}).get("summary") if r.analysis else None
    sizes = r.options.size_overrides
    return _lines(
        f"task {r.task_id} ({r.problem}, {r.origin}); stage {r.stage}; dtype {r.options.dtype}, tolerance "
        f"{r.options.tolerance.name} (atol={r.options.tolerance.atol:g}, rtol={r.options.tolerance.rtol:g})",
        "timing: " + ("GPU " + (r.options.gpu_name or "") if r.timing_available
                      else "no GPU (Triton CPU interpreter, correctness only)")
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
        "brief (the rules and paradigms): below; also structuredContent.brief, structured form in seed_plan",
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
    share = getattr(res, "error_share", None)
    if r.verdict == "correct" and share is not None:
        parts.append(f"error: max {share.max_share:.1%} of the tolerance (p99 {share.p99_share:.1%}) at {share.path}, "
                     f"over {share.trials} compared calls")
    elif r.verdict == "correct":
        parts.append("error: no share of the tolerance (no floating-point output was compared with a tolerance: "
                     "integers, bools and exact scalars must be equal; or this result was stored before shares were)")
    sizes = (res.options.size_overrides if res.options else None) or {}
    if sizes:
        parts.append(f"evaluated at sizes {sizes}")
    m = res.mismatch
    if m is not None:
        parts.append(f"mismatch: output {m.output_index}, {m.fraction_mismatched or 0:.2%} off, max abs "
                     f"{m.max_abs_error if m.max_abs_error is not None else 'n/a'}, non-finite "
                     f"{m.nonfinite_count or 0}, "
                     f"first bad {m.first_bad_indices[:3]}; hint: {_clip(m.hint, 220)}")
    e = res.error
    if e is not None:
        parts.append(f"error: {e.kind}: {_clip(e.message, 260)}"
                     + (f" (candidate line {e.candidate_line})" if e.candidate_line else ""))
    bad = [f for f in res.integrity if f.severity == "violation"]
    if bad:
        parts.append("integrity: " + "; ".join(_clip(f"{f.check}: {f.detail}", 150) for f in bad[:2]))
    if r.debug_brief and r.verdict != "correct":
        parts.append(f"debug brief: below; also structuredContent.debug_brief and resource "
                     f"egg://tasks/{r.task_id}/brief/debug")
    parts.append(f"full result: structuredContent.result or egg://tasks/{r.task_id}/candidates/{r.candidate_id}/result")
    parts.append(f"next: {r.next_step}")
    return _lines(*parts)


def profile_ncu(r) -> str:
    rep = r.report
    lines = [f"profile {r.report_id} of {r.candidate_id} ({rep.source}, stage {rep.stage}): {_clip(rep.summary, 300)}"]
    roof = rep.roofline if isinstance(rep.roofline, str) or rep.roofline is None else rep.roofline.summary
    if roof:
        lines.append(f"roofline: {_clip(roof, 380)}")  # its verdict and where its ceilings come from
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
    if p.model_constants and not p.measured:  # the predictions below stand on them
        lines.append(_clip(p.model_constants, 220))
    for c in p.ranked[:3]:
        lines.append(f"#{c.rank} {c.config.values}: predicted {_ms(c.predicted_ms)}, measured {_ms(c.measured_ms)}"
                     + (f", {_clip(c.error, 80)}" if c.error else ""))
    if p.recommended:
        lines.append(f"recommended {p.recommended.values}: {_clip(p.recommended_reason, 200)}"
                     + ("; source in structuredContent.proposal.recommended_source" if p.recommended_source else ""))
    elif p.recommended_reason:
        lines.append(f"no recommendation: {_clip(p.recommended_reason, 200)}")
    if p.excluded:
        lines.append("not tuned (never rewritten): " + "; ".join(
            f"{k}: {_clip(v, 80)}" for k, v in list(p.excluded.items())[:3]))
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
    cands = [f"{c.candidate_id} {c.verdict or c.status} {_ms(c.time_ms)}" + (" (quick check)" if c.quick_sizes else "")
             for c in r.candidates_in_stage[-6:]]
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
        f"analysis: {_clip(r.analysis_summary, 480)}" if r.analysis_summary else "",
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
        + (f" at the quick-check sizes {c.quick_sizes}" if c.quick_sizes else "")
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
    """The result's text block: its summary clipped to MAX_TEXT bytes (`lead`, the weak sandbox level an operator
    allowed, first and never clipped away), then its guidance (MAX_BRIEF bytes)."""
    fn = _BY_TOOL.get(tool)
    text = fn(result) if fn else _clip(result.model_dump_json(), MAX_TEXT)
    if lead:
        text = f"{_clip(lead, 400)}\n{text}"
    raw = text.encode()
    if len(raw) > MAX_TEXT:
        text = raw[: MAX_TEXT - 40].decode(errors="ignore") + "\n… (full result in structuredContent)"
    guidance = _guidance(tool, result)
    if guidance is not None:
        title, brief, where = guidance
        text += f"{BRIEF_MARK}{title} ===\n" + compact_brief(brief, where)
    return text


def tool_result(tool: str, result: BaseModel, lead: str | None = None) -> CallToolResult:
    """structuredContent: the whole model; content: its summary (after `lead`, if any)."""
    data: dict[str, Any] = result.model_dump(mode="json", by_alias=True)
    return CallToolResult(content=[TextContent(type="text", text=summary_text(tool, result, lead))],
                          structured_content=data)
