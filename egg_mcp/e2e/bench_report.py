"""`egg-mcp bench` outputs: summary.json, summary.md (tables per level) and speedups.png."""

from __future__ import annotations

from pathlib import Path

from egg_mcp.e2e.bench_results import FAST_P_THRESHOLDS, BenchSummary, _p, geomean
from egg_mcp.e2e.task_report import pyplot


def _f(v: float | None, fmt: str = "{:.3g}") -> str:
    return "—" if v is None else fmt.format(v)


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.1f}%"


def render_markdown(summary: BenchSummary) -> str:
    lines = [f"# egg-mcp bench ({summary.mode})", "",
             f"problems: `{summary.problems_dir}`; solutions: `{summary.solutions_dir}`", "",
             "| level | problems | correct | missing | fast_0 | fast_1 | fast_1.5 | fast_2 | geomean vs eager | "
             "geomean vs torch.compile |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    groups = list(summary.levels.items())
    if len(groups) > 1:
        groups.append(("overall", summary.overall))
    for name, g in groups:
        lines.append(f"| {name} | {g.n} | {g.correct} ({_pct(g.correctness_rate)}) | {g.missing} | "
                     + " | ".join(_pct(g.fast_p[_p(p)]) for p in FAST_P_THRESHOLDS)
                     + f" | {_f(g.geomean_speedup_vs_eager, '{:.3f}x')} | "
                       f"{_f(g.geomean_speedup_vs_compile, '{:.3f}x')} |")
    lines += ["", "fast_p: fraction of all problems that are correct and faster than p x PyTorch eager "
              "(KernelBench); a problem without a solution counts as not correct. Geomeans over correct problems.",
              "", "| problem | verdict | time ms | eager ms | torch.compile ms | vs eager | vs torch.compile | note |",
              "|---|---|---|---|---|---|---|---|"]
    for r in summary.results:
        note = r.summary if r.verdict != "correct" else (r.timing_unavailable_reason or "; ".join(r.integrity))
        note = (note or "").replace("|", "\\|").replace("\n", " ")[:160]
        lines.append(f"| {r.key} | {r.verdict} | {_f(r.time_ms, '{:.4g}')} | {_f(r.eager_ms, '{:.4g}')} | "
                     f"{_f(r.compile_ms, '{:.4g}')} | {_f(r.speedup_vs_eager, '{:.2f}x')} | "
                     f"{_f(r.speedup_vs_compile, '{:.2f}x')} | {note} |")
    if summary.orphan_solutions:
        lines += ["", "Solutions that match no problem: " + ", ".join(f"`{o}`" for o in summary.orphan_solutions)]
    if summary.notes:
        lines += [""] + [f"- {n}" for n in summary.notes]
    return "\n".join(lines) + "\n"


def speedup_chart(summary: BenchSummary, path: Path) -> Path | None:
    """Speedup vs eager of every correct, timed problem, one strip per level (log scale), with the
    level's geomean marked. None when nothing was timed or matplotlib is missing."""
    per_level = {lv: [r.speedup_vs_eager for r in summary.results
                      if r.level == lv and r.verdict == "correct" and r.speedup_vs_eager]
                 for lv in summary.levels}
    per_level = {lv: v for lv, v in per_level.items() if v}
    if not per_level:
        return None
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(max(4.5, 1.8 * len(per_level) + 2), 4), dpi=120)
    for i, (lv, values) in enumerate(per_level.items()):
        jitter = [i + 0.25 * ((j * 0.618) % 1 - 0.5) for j in range(len(values))]
        ax.scatter(jitter, values, s=18, alpha=0.75, color="#4C72B0")
        g = geomean(values)
        if g:
            ax.hlines(g, i - 0.3, i + 0.3, color="#C44E52", linewidth=2)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_yscale("log")
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    everything = [v for vs in per_level.values() for v in vs] + [1.0]
    lo, hi = min(everything) / 1.3, max(everything) * 1.3
    ax.set_ylim(lo, hi)
    ax.set_yticks([t for t in (0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 50, 100) if lo <= t <= hi])
    ax.set_xlim(-0.6, len(per_level) - 0.4)
    ax.set_xticks(range(len(per_level)))
    ax.set_xticklabels([f"{lv}\n(n={len(v)})" for lv, v in per_level.items()])
    ax.set_ylabel("speedup vs PyTorch eager (log)")
    ax.set_title("speedup of correct solutions (red: geomean)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def write_outputs(summary: BenchSummary, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    js = out_dir / "summary.json"
    js.write_text(summary.model_dump_json(indent=2))
    md = out_dir / "summary.md"
    md.write_text(render_markdown(summary))
    chart = speedup_chart(summary, out_dir / "speedups.png")
    return [js, md] + ([chart] if chart else [])


# -- evaluation ------------------------------------------------------------------------------------------
