"""`egg-mcp bench` inputs: pairing problems with solutions, the options each is evaluated with, and
which problems still need a run (a re-run skips unchanged problem + solution pairs)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable, Sequence

from pydantic import BaseModel, Field

from egg_mcp.contract import EvalOptions, default_tolerance
from egg_mcp.e2e.bench_results import LEVEL_DIR, ProblemResult, fingerprint
from egg_mcp.problems.loader import derive_quick_sizes, module_int_constants, quick_sizes

FLAT_LEVEL = "all"
RETRY_VERDICTS = frozenset({"harness_error", "interrupted"})
"""Not a property of the solution: such problems are evaluated again on the next run."""


class BenchError(ValueError):
    """Bad folders or arguments; the message says what to pass instead."""


# -- discovery ------------------------------------------------------------------------------------


class BenchItem(BaseModel):
    key: str = Field(description="'level1/23_Softmax', or the name for a flat folder")
    level: str = Field(description="'level1', ... or 'all' for a flat folder of problems")
    name: str
    problem_path: str
    solution_path: str | None = None


def problem_files(root: Path) -> list[tuple[str, Path]]:
    """(level, path) of every problem under a KernelBench checkout (`KernelBench/levelN/*.py` or
    `levelN/*.py`) or a flat folder of KernelBench-format problems."""
    if not root.is_dir():
        raise BenchError(f"problems folder {root} does not exist; pass --problems or --kernelbench-dir")
    base = root / "KernelBench" if (root / "KernelBench").is_dir() else root
    levels = sorted((d for d in base.iterdir() if d.is_dir() and LEVEL_DIR.match(d.name)),
                    key=lambda d: int(LEVEL_DIR.match(d.name).group(1)))  # type: ignore[union-attr]
    if levels:
        return [(d.name, p) for d in levels for p in sorted(d.glob("*.py")) if not p.name.startswith("_")]
    return [(FLAT_LEVEL, p) for p in sorted(base.glob("*.py")) if not p.name.startswith("_")]


def normalise_levels(levels: Iterable[str]) -> set[str]:
    out = set()
    for lv in levels:
        lv = str(lv).strip()
        if lv.isdigit():
            lv = f"level{lv}"
        if not (LEVEL_DIR.match(lv) or lv == FLAT_LEVEL):
            raise BenchError(f"--level {lv!r}: use a number (1) or a folder name (level1)")
        out.add(lv)
    return out


def discover(problems_dir: Path, solutions_dir: Path, levels: Iterable[str] = ()) -> tuple[list[BenchItem], list[str]]:
    """Pair every problem with its solution (`<solutions>/<level>/<name>.py`, else `<solutions>/<name>.py`).
    Returns the items (solution_path None when there is none) and solution files that match no problem."""
    if not solutions_dir.is_dir():
        raise BenchError(f"solutions folder {solutions_dir} does not exist: pass a folder of <problem-name>.py "
                         "files, each defining ModelNew")
    wanted = normalise_levels(levels)
    files = problem_files(problems_dir)
    if not files:
        raise BenchError(f"no problems (*.py) under {problems_dir}")
    items, used = [], set()
    for level, path in files:
        if wanted and level not in wanted:
            continue
        name = path.stem
        sol = next((c for c in (solutions_dir / level / f"{name}.py", solutions_dir / f"{name}.py") if c.is_file()),
                   None)
        if sol is not None:
            used.add(sol.resolve())
        key = name if level == FLAT_LEVEL else f"{level}/{name}"
        items.append(BenchItem(key=key, level=level, name=name, problem_path=str(path),
                               solution_path=str(sol) if sol else None))
    if not items:
        raise BenchError(f"no problems under {problems_dir} in levels {sorted(wanted)}")
    orphans = sorted(str(p) for p in solutions_dir.rglob("*.py")
                     if p.resolve() not in used and not p.name.startswith("_")
                     and (not wanted or _level_ok(p, solutions_dir, wanted)))
    return items, orphans


def _level_ok(path: Path, root: Path, wanted: set[str]) -> bool:
    rel = path.relative_to(root).parts
    return len(rel) == 1 or rel[0] in wanted


def eval_options(problem_source: str, *, interpreter: bool) -> tuple[EvalOptions, list[str]]:
    """fp32 at KernelBench v0.1 tolerance. In the interpreter the problem's QUICK_SIZES are used, else sizes
    derived from its constants (problems.loader.derive_quick_sizes): full KernelBench sizes take hours there."""
    notes = []
    overrides: dict[str, int | list[int]] = {}
    if interpreter:
        overrides = quick_sizes(problem_source)
        if not overrides:
            overrides = derive_quick_sizes(module_int_constants(problem_source))
            notes.append(f"no QUICK_SIZES in the problem: interpreted at sizes derived from its constants {overrides}"
                         if overrides else "no QUICK_SIZES in the problem and no size to shrink: interpreted at full "
                                           "size")
    options = EvalOptions(dtype="float32", tolerance=default_tolerance("float32"), size_overrides=overrides,
                          device="interpreter" if interpreter else "auto", timing=not interpreter)
    return options, notes


def problem_sha(problem_source: str) -> str:
    return hashlib.sha256(problem_source.encode()).hexdigest()[:20]


def pending(items: Sequence[BenchItem], done: dict[str, ProblemResult], *, interpreter: bool) -> list[BenchItem]:
    """Items without a finished result for the same problem, solution and mode."""
    mode = "interpreter" if interpreter else "gpu"
    todo = []
    for item in items:
        prev = done.get(item.key)
        if prev is None or prev.verdict in RETRY_VERDICTS:
            todo.append(item)
            continue
        sol = Path(item.solution_path).read_text() if item.solution_path else None
        if prev.fingerprint != fingerprint(Path(item.problem_path).read_text(), sol, mode):
            todo.append(item)
    return todo
