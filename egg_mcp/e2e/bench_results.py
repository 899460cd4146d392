"""`egg-mcp bench` results: one record per problem, the results file, and the aggregate figures
(correctness rate, KernelBench's fast_p, geometric-mean speedups), overall and per level."""

from __future__ import annotations

import hashlib
import math
import os
import re
import time
from pathlib import Path
from typing import Iterable, Sequence

from pydantic import BaseModel, Field

FAST_P_THRESHOLDS: tuple[float, ...] = (0.0, 1.0, 1.5, 2.0)
LEVEL_DIR = re.compile(r"^level(\d+)$")
RESULTS_GLOB = "results*.jsonl"


class ProblemResult(BaseModel):
    key: str
    level: str
    name: str
    verdict: str = Field(description="the engine's verdict, 'missing' (no solution) or 'harness_error'")
    summary: str = ""
    time_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    timing_unavailable_reason: str | None = None
    integrity: list[str] = Field(default_factory=list)
    fingerprint: str = Field(default="", description="hash of problem, solution and mode: a change re-runs the problem")
    problem_sha: str = Field(default="", description="hash of the problem source (baselines are reused across "
                                                     "solutions)")
    mode: str = Field(default="", description="'gpu' or 'interpreter'")
    device: str | None = None
    ran_on: str | None = Field(default=None, description="host, GPU index, model and lane the solution was verified on")
    size_overrides: dict[str, int | list[int]] = Field(default_factory=dict)
    wall_s: float = 0.0
    finished_at: float = Field(default_factory=time.time, description="unix time; the latest result of a key wins")


def ratio(base_ms: float | None, t_ms: float | None) -> float | None:
    if base_ms is None or t_ms is None or base_ms <= 0 or t_ms <= 0:
        return None
    return base_ms / t_ms


def fingerprint(problem_source: str, solution_source: str | None, mode: str) -> str:
    h = hashlib.sha256()
    for part in (problem_source, "\0", solution_source or "<missing>", "\0", mode):
        h.update(part.encode())
    return h.hexdigest()[:20]


def load_results(out_dir: Path) -> dict[str, ProblemResult]:
    """Finished results by key (the latest wins), from every results*.jsonl in `out_dir`."""
    found: dict[str, ProblemResult] = {}
    for path in sorted(out_dir.glob(RESULTS_GLOB)):
        for line in path.read_text().splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                r = ProblemResult.model_validate_json(line)
            except ValueError:
                continue  # a line cut short by a kill: that problem runs again
            if r.key not in found or r.finished_at >= found[r.key].finished_at:
                found[r.key] = r
    return found


def append_result(path: Path, result: ProblemResult) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(result.model_dump_json() + "\n")
        f.flush()
        os.fsync(f.fileno())


# -- aggregation (pure) -----------------------------------------------------------------------------


def fast_p(results: Sequence[ProblemResult], p: float, baseline: str = "eager") -> float | None:
    """KernelBench fast_p: fraction of ALL results that are correct and have speedup > p over the
    baseline. None when nothing was timed (e.g. CPU interpreter): then it cannot be known."""
    if not results:
        return None
    attr = "speedup_vs_eager" if baseline == "eager" else "speedup_vs_compile"
    if not any(getattr(r, attr) is not None for r in results):
        return None
    hits = sum(1 for r in results if r.verdict == "correct" and getattr(r, attr) is not None and getattr(r, attr) > p)
    return hits / len(results)


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive values; None when there are none."""
    logs = [math.log(v) for v in values if v is not None and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


class GroupSummary(BaseModel):
    n: int
    correct: int
    missing: int
    correctness_rate: float | None
    timed: int = Field(description="correct problems with a time and an eager baseline")
    fast_p: dict[str, float | None] = Field(description="vs eager, keyed by p")
    fast_p_vs_compile: dict[str, float | None]
    geomean_speedup_vs_eager: float | None
    geomean_speedup_vs_compile: float | None
    verdicts: dict[str, int]


def summarise(results: Sequence[ProblemResult]) -> GroupSummary:
    n = len(results)
    correct = [r for r in results if r.verdict == "correct"]
    verdicts: dict[str, int] = {}
    for r in results:
        verdicts[r.verdict] = verdicts.get(r.verdict, 0) + 1
    return GroupSummary(
        n=n, correct=len(correct), missing=verdicts.get("missing", 0),
        correctness_rate=len(correct) / n if n else None,
        timed=sum(1 for r in correct if r.speedup_vs_eager is not None),
        fast_p={_p(p): fast_p(results, p) for p in FAST_P_THRESHOLDS},
        fast_p_vs_compile={_p(p): fast_p(results, p, "compile") for p in FAST_P_THRESHOLDS},
        geomean_speedup_vs_eager=geomean(r.speedup_vs_eager for r in correct),
        geomean_speedup_vs_compile=geomean(r.speedup_vs_compile for r in correct),
        verdicts=dict(sorted(verdicts.items())),
    )


def _p(p: float) -> str:
    return f"{p:g}"


class BenchSummary(BaseModel):
    problems_dir: str
    solutions_dir: str
    mode: str
    overall: GroupSummary
    levels: dict[str, GroupSummary]
    results: list[ProblemResult]
    orphan_solutions: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    wall_s: float = 0.0


def aggregate(results: Sequence[ProblemResult], *, problems_dir: str = "", solutions_dir: str = "",
              mode: str = "", orphans: Sequence[str] = (), notes: Sequence[str] = ()) -> BenchSummary:
    by_level: dict[str, list[ProblemResult]] = {}
    for r in results:
        by_level.setdefault(r.level, []).append(r)
    return BenchSummary(
        problems_dir=problems_dir, solutions_dir=solutions_dir, mode=mode, overall=summarise(results),
        levels={lv: summarise(rs) for lv, rs in sorted(by_level.items(), key=lambda kv: _level_order(kv[0]))},
        results=sorted(results, key=lambda r: (_level_order(r.level), _natural(r.name))),
        orphan_solutions=list(orphans), notes=list(notes),
    )


def _level_order(level: str) -> int:
    m = LEVEL_DIR.match(level)
    return int(m.group(1)) if m else 0


def _natural(name: str) -> tuple[int, str]:
    head = name.split("_", 1)[0]
    return (int(head), name) if head.isdigit() else (10**9, name)


# -- rendering ----------------------------------------------------------------------------------------
