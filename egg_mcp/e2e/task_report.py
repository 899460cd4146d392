"""Task report: a markdown write-up of a finished (or partial) task and a chart of time per committed
stage — the per-stage ablation of the EGG paper, for one task.

Everything here works from `task_status` output (the `TaskStatus` model or its JSON), so a report can
be made from a running server through any client:

    python tools/egg_client.py --stdio "egg-mcp serve" call task_status '{"task_id": "t-..."}' > status.json
    python -m egg_mcp.e2e.task_report status.json report/ [--kernel exported.py]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Iterable

from egg_mcp.workflow.models import CommittedStage, TaskStatus


def as_status(status: TaskStatus | dict[str, Any]) -> TaskStatus:
    return status if isinstance(status, TaskStatus) else TaskStatus.model_validate(status)


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v:.4g}"


def _x(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}x"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def stage_gains(history: list[CommittedStage]) -> list[float | None]:
    """Speedup of each committed stage over the one before it (None for the first or without times)."""
    gains: list[float | None] = []
    prev: float | None = None
    for i, c in enumerate(history):
        gains.append(None if i == 0 or prev is None or c.time_ms is None or c.time_ms <= 0 else round(prev / c.time_ms,
                                                                                                      4))
        prev = c.time_ms
    return gains


def stage_table(status: TaskStatus | dict[str, Any]) -> str:
    """Markdown table: one row per committed stage."""
    st = as_status(status)
    lines = ["| stage | candidate | time ms | vs previous | vs eager | vs torch.compile | decision |",
             "|---|---|---|---|---|---|---|"]
    for c, gain in zip(st.history, stage_gains(st.history)):
        decision = c.decision.summary + (" **(forced: " + (c.force_reason or "") + ")**" if c.forced else "")
        lines.append(f"| {c.stage} | {c.candidate_id} | {_ms(c.time_ms)} | {_x(gain)} | {_x(c.speedup_vs_eager)} | "
                     f"{_x(c.speedup_vs_compile)} | {_cell(decision)} |")
    return "\n".join(lines)


def _evidence_lines(c: CommittedStage) -> list[str]:
    out = []
    for e in c.decision.evidence:
        parts = [f"`{e.metric}`"]
        if e.before is not None:
            parts.append(f"before {_fmt(e.before)}")
        if e.after is not None:
            parts.append(f"after {_fmt(e.after)}")
        if e.report_id:
            parts.append(f"(report {e.report_id})")
        out.append("  - " + " ".join(parts))
    return out


def _fmt(v: float | str) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def render_task_report(status: TaskStatus | dict[str, Any], *, kernel_path: str | None = None,
                       notes: Iterable[str] = (), demo_table: str | None = None) -> str:
    """The markdown report of a task: setup, stage table, every decision with its evidence, the kernel."""
    st = as_status(status)
    opts = st.options
    lines = [f"# egg-mcp task report: {st.problem}", "",
             f"- task: `{st.task_id}` ({st.origin}), stage now **{st.stage}**",
             f"- dtype {opts.dtype}, tolerance {opts.tolerance.name} (atol {opts.tolerance.atol:g}, "
             f"rtol {opts.tolerance.rtol:g}), {opts.correctness_trials} correctness trials",
             f"- measured on: {opts.gpu_name or 'CPU interpreter (no timings)'}"]
    if opts.size_overrides:
        lines.append("- sizes overridden for evaluation: " + ", ".join(f"{k}={v}" for k,
                                                                       v in opts.size_overrides.items()))
    lines.append(f"- baselines: PyTorch eager {_ms(st.eager_ms)} ms, torch.compile {_ms(st.compile_ms)} ms")
    if kernel_path:
        lines.append(f"- final kernel: `{kernel_path}`")
    lines += ["", "## Committed stages", ""]
    if st.history:
        lines.append(stage_table(st))
        if all(c.time_ms is None for c in st.history):
            lines += ["", "No times: the task ran without a GPU (correctness only). Timings need a GPU."]
    else:
        lines.append("Nothing committed yet.")
    lines += ["", "## Decisions", ""]
    for c in st.history:
        lines.append(f"### {c.stage}: {c.decision.summary}")
        lines.append("")
        if c.decision.changes:
            lines.append("Changes:")
            lines += [f"- {ch}" for ch in c.decision.changes]
        if c.decision.rationale:
            lines.append(f"Why: {c.decision.rationale}")
        if c.decision.evidence:
            lines.append("Evidence:")
            lines += _evidence_lines(c)
        if c.guard:
            lines.append(f"Regression guard: {c.guard}")
        if c.forced:
            lines.append(f"**Forced past the guard**: {c.force_reason}")
        lines.append("")
    if st.reports:
        lines += ["## Reports", ""]
        lines += [f"- {r.get('kind')} `{r.get('id')}` on {r.get('candidate_id')} ({r.get('stage')})"
                  for r in st.reports]
        lines.append("")
    notes = list(notes)
    if notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    if demo_table:
        lines += ["## Demo run", "", demo_table]
    return "\n".join(lines).rstrip() + "\n"


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend, or None (with a hint) when it is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no chart (pip install 'egg-mcp[report]')", file=sys.stderr)
        return None
    return plt


def stage_time_chart(status: TaskStatus | dict[str, Any], path: Path) -> Path | None:
    """Bar chart of the time after each committed stage, with the eager and torch.compile baselines
    as lines. Returns None (and writes nothing) when no stage has a time or matplotlib is missing."""
    st = as_status(status)
    timed = [(c.stage, c.time_ms) for c in st.history if c.time_ms is not None]
    if not timed:
        return None
    plt = pyplot()
    if plt is None:
        return None
    labels = [s.replace("PARALLEL_MAPPING", "MAPPING") for s, _ in timed]
    times = [t for _, t in timed]
    fig, ax = plt.subplots(figsize=(7, 3.8), dpi=120)
    bars = ax.bar(labels, times, color="#4C72B0")
    for bar, t in zip(bars, times):
        ax.annotate(f"{t:.3g}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                    fontsize=8)
    if st.eager_ms is not None:
        ax.axhline(st.eager_ms, color="#C44E52", linestyle="--", linewidth=1, label=f"eager {st.eager_ms:.3g} ms")
    if st.compile_ms is not None:
        ax.axhline(st.compile_ms, color="#55A868", linestyle=":", linewidth=1.2,
                   label=f"torch.compile {st.compile_ms:.3g} ms")
    ax.set_ylabel("time (ms)")
    ax.set_title(f"{st.problem}: time after each committed stage"
                 + (f" ({st.options.gpu_name})" if st.options.gpu_name else ""))
    if st.eager_ms is not None or st.compile_ms is not None:
        ax.legend(fontsize=8, loc="upper right", framealpha=0.9)
    ax.set_ylim(0, max(times + [st.eager_ms or 0, st.compile_ms or 0]) * 1.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def write_task_report(status: TaskStatus | dict[str, Any], out_dir: Path, *, kernel_path: str | None = None,
                      notes: Iterable[str] = ()) -> list[Path]:
    """`<out>/report.md` and, when there are times, `<out>/stage_times.png`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / "report.md"
    md.write_text(render_task_report(status, kernel_path=kernel_path, notes=notes))
    chart = stage_time_chart(status, out_dir / "stage_times.png")
    return [md] + ([chart] if chart else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m egg_mcp.e2e.task_report",
                                     description="markdown report and stage-time chart from task_status JSON")
    parser.add_argument("status_json", type=Path, help="output of the task_status tool (a file, or - for stdin)")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--kernel", help="path of the exported kernel to cite")
    args = parser.parse_args(argv)
    raw = sys.stdin.read() if str(args.status_json) == "-" else args.status_json.read_text()
    try:
        status = as_status(json.loads(raw))
    except (json.JSONDecodeError, ValueError) as exc:
        print(f"{args.status_json} is not task_status output: {exc}", file=sys.stderr)
        return 2
    for path in write_task_report(status, args.out_dir, kernel_path=args.kernel):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
