"""`egg-mcp bench`: evaluate a folder of solutions against KernelBench-format problems.

Per problem: verdict, time, eager and torch.compile baseline times, speedups; overall and per
level: correctness rate, fast_p (KernelBench: the fraction of ALL problems that are correct AND
faster than p x the eager baseline; a problem without a solution file counts as not correct),
geometric-mean speedups over the correct problems. Output in `--out`: `results.jsonl` (one line per
problem, appended as it finishes: a re-run skips problems whose problem and solution are unchanged),
`summary.json`, `summary.md` and `speedups.png`.

Every evaluation goes through the engine (`WorkerEvaluator`): solutions run in isolated worker
processes, never in this one. With several GPUs, one bench worker process per GPU
(CUDA_VISIBLE_DEVICES=i, its own engine) takes every n-th problem, so GPU jobs never share a device.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterable, Sequence

from pydantic import BaseModel, Field

from egg_mcp.config import ServerConfig
from egg_mcp.e2e.bench_report import render_markdown, speedup_chart, write_outputs  # noqa: F401 (re-exported)
from egg_mcp.e2e.bench_results import (  # noqa: F401 (re-exported)
    FAST_P_THRESHOLDS, LEVEL_DIR, RESULTS_GLOB, BenchSummary, GroupSummary, ProblemResult, aggregate, append_result,
    fast_p, fingerprint, geomean, load_results, ratio, summarise,
)
from egg_mcp.evaluation.api import EvalOptions, Evaluator, default_tolerance
from egg_mcp.problems.loader import quick_sizes

PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent.parent)
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
        sol = next((c for c in (solutions_dir / level / f"{name}.py", solutions_dir / f"{name}.py") if c.is_file()), None)
        if sol is not None:
            used.add(sol.resolve())
        key = name if level == FLAT_LEVEL else f"{level}/{name}"
        items.append(BenchItem(key=key, level=level, name=name, problem_path=str(path),
                               solution_path=str(sol) if sol else None))
    if not items:
        raise BenchError(f"no problems under {problems_dir} in levels {sorted(wanted)}")
    orphans = sorted(str(p) for p in solutions_dir.rglob("*.py")
                     if p.resolve() not in used and not p.name.startswith("_") and (not wanted or _level_ok(p, solutions_dir, wanted)))
    return items, orphans


def _level_ok(path: Path, root: Path, wanted: set[str]) -> bool:
    rel = path.relative_to(root).parts
    return len(rel) == 1 or rel[0] in wanted


# -- results ----------------------------------------------------------------------------------------

def eval_options(problem_source: str, *, interpreter: bool) -> tuple[EvalOptions, list[str]]:
    """fp32 at KernelBench v0.1 tolerance. In the interpreter the problem's QUICK_SIZES (if any) are used:
    full KernelBench sizes take hours there."""
    notes = []
    overrides: dict[str, int] = {}
    if interpreter:
        overrides = quick_sizes(problem_source)
        if not overrides:
            notes.append("no QUICK_SIZES in the problem: interpreted at full size (slow)")
    options = EvalOptions(dtype="float32", tolerance=default_tolerance("float32"), size_overrides=overrides,
                          device="interpreter" if interpreter else "auto", timing=not interpreter)
    return options, notes


BaselineCache = dict[str, tuple[float | None, float | None, str | None]]
"""problem sha -> (eager ms, compile ms, compile error): baselines depend on the problem only."""


def problem_sha(problem_source: str) -> str:
    return hashlib.sha256(problem_source.encode()).hexdigest()[:20]


def baseline_cache_from(results: Iterable[ProblemResult]) -> BaselineCache:
    """Baselines measured on the GPU by an earlier run, reusable for an unchanged problem."""
    return {r.problem_sha: (r.eager_ms, r.compile_ms, None) for r in results
            if r.problem_sha and r.mode == "gpu" and r.eager_ms is not None}


async def evaluate_item(evaluator: Evaluator, item: BenchItem, *, interpreter: bool,
                        baseline_cache: BaselineCache | None = None) -> ProblemResult:
    """Evaluate one problem's solution (and, when it is correct and timed, the baselines: once per
    problem source, through `baseline_cache`)."""
    t0 = time.monotonic()
    problem_source = Path(item.problem_path).read_text()
    mode = "interpreter" if interpreter else "gpu"
    base = dict(key=item.key, level=item.level, name=item.name, mode=mode, problem_sha=problem_sha(problem_source))
    if item.solution_path is None:
        return ProblemResult(**base, verdict="missing", summary="no solution file",
                             fingerprint=fingerprint(problem_source, None, mode))
    solution_source = Path(item.solution_path).read_text()
    fp = fingerprint(problem_source, solution_source, mode)
    options, notes = eval_options(problem_source, interpreter=interpreter)
    try:
        result = await evaluator.evaluate(problem_source, solution_source, options)
        eager_ms = compile_ms = None
        if result.verdict == "correct" and result.timing is not None:
            cache = baseline_cache if baseline_cache is not None else {}
            psha = problem_sha(problem_source)
            if psha not in cache:
                baselines = await evaluator.baselines(problem_source, options)
                cache[psha] = (baselines.eager.median_ms if baselines.eager else None,
                               baselines.compiled.median_ms if baselines.compiled else None,
                               baselines.compile_error or baselines.unavailable_reason)
            eager_ms, compile_ms, baseline_error = cache[psha]
            if baseline_error and compile_ms is None:
                notes.append(f"baseline: {baseline_error[:200]}")
    except Exception as exc:  # the harness failed, not the solution: retried on the next run
        return ProblemResult(**base, verdict="harness_error", summary=f"{type(exc).__name__}: {exc}"[:500],
                             fingerprint=fp, wall_s=round(time.monotonic() - t0, 2))
    time_ms = result.timing.median_ms if result.verdict == "correct" and result.timing else None
    return ProblemResult(
        **base, verdict=result.verdict, summary=" ".join([result.summary, *notes]).strip(), time_ms=time_ms,
        eager_ms=eager_ms, compile_ms=compile_ms, speedup_vs_eager=ratio(eager_ms, time_ms),
        speedup_vs_compile=ratio(compile_ms, time_ms), timing_unavailable_reason=result.timing_unavailable_reason,
        integrity=[f"{f.severity}: {f.check}: {f.detail}" for f in result.integrity], fingerprint=fp,
        device=result.env.device if result.env else None, size_overrides=options.size_overrides,
        wall_s=round(time.monotonic() - t0, 2),
    )


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


class Progress:
    """A one-line progress bar on stderr (a line per problem when stderr is not a terminal)."""

    def __init__(self, total: int, *, enabled: bool = True, stream=None):
        self.total = total
        self.done = 0
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.t0 = time.monotonic()

    def update(self, result: ProblemResult) -> None:
        self.done += 1
        if not self.enabled:
            return
        width = 24
        filled = int(width * self.done / max(1, self.total))
        speed = f" {result.speedup_vs_eager:.2f}x" if result.speedup_vs_eager else ""
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                f"{time.monotonic() - self.t0:.0f}s  {result.key}: {result.verdict}{speed}")
        if self.tty:
            self.stream.write("\r\033[K" + line + ("\n" if self.done >= self.total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


async def evaluate_items(evaluator: Evaluator, items: Sequence[BenchItem], results_path: Path, *,
                         interpreter: bool, progress: Progress | None = None,
                         baseline_cache: BaselineCache | None = None) -> list[ProblemResult]:
    """One problem at a time on this evaluator (its GPU jobs are serialised anyway)."""
    out = []
    cache = baseline_cache if baseline_cache is not None else baseline_cache_from(load_results(results_path.parent).values())
    for item in items:
        r = await evaluate_item(evaluator, item, interpreter=interpreter, baseline_cache=cache)
        append_result(results_path, r)
        out.append(r)
        if progress:
            progress.update(r)
    return out


def gpu_count() -> int:
    from egg_mcp.hardware import nvml_gpu_names

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = nvml_gpu_names()
    if visible is not None:
        ids = [v for v in visible.split(",") if v.strip()]
        return min(len(ids), len(names)) if names else 0
    return len(names)


def _make_evaluator(config: ServerConfig, scratch: Path):
    from egg_mcp.evaluation.engine import WorkerEvaluator  # lazily: the engine is heavy and optional here

    return WorkerEvaluator(scratch_dir=scratch, force_interpreter=config.force_interpreter)


async def _aclose(evaluator) -> None:
    close = getattr(evaluator, "aclose", None)
    if close is not None:
        await close()


def run_bench(problems_dir: Path, solutions_dir: Path, out_dir: Path, *, config: ServerConfig,
              levels: Iterable[str] = (), evaluator: Evaluator | None = None, gpus: int | None = None,
              show_progress: bool = True) -> BenchSummary:
    """Evaluate, resume, aggregate and write the outputs. `evaluator` (tests) bypasses the engine and
    the per-GPU worker processes."""
    import anyio
    import anyio.to_thread

    t0 = time.monotonic()
    items, orphans = discover(problems_dir, solutions_dir, levels)
    out_dir.mkdir(parents=True, exist_ok=True)
    own = evaluator is None
    if own:
        evaluator = _make_evaluator(config, config.workspace / "scratch" / "bench")
    interpreter = config.force_interpreter or not evaluator.has_gpu()
    todo = pending(items, load_results(out_dir), interpreter=interpreter)
    notes = []
    if interpreter:
        notes.append("CPU interpreter: correctness only at the problems' QUICK_SIZES; timings and fast_p need a GPU")
    skipped = len(items) - len(todo)
    if skipped:
        notes.append(f"{skipped} problem(s) reused from an earlier run in {out_dir} (unchanged problem and solution)")
    if show_progress:
        print(f"bench: {len(items)} problem(s), {len(todo)} to evaluate ({'interpreter' if interpreter else 'GPU'})",
              file=sys.stderr)
    progress = Progress(len(todo), enabled=show_progress)
    n_gpus = 0 if interpreter or not own else (gpus if gpus is not None else gpu_count())
    if n_gpus > 1 and len(todo) > 1:
        notes.append(f"{n_gpus} GPUs: one bench worker process per GPU")

    async def evaluate_all() -> None:
        # one event loop for the evaluator's whole life: its workers belong to the loop that started them
        try:
            if n_gpus > 1 and len(todo) > 1:
                await anyio.to_thread.run_sync(lambda: _run_sharded(todo, out_dir, config, n_gpus, progress))
            elif todo:
                await evaluate_items(evaluator, todo, out_dir / "results.jsonl", interpreter=interpreter,
                                     progress=progress)
        finally:
            if own:
                await _aclose(evaluator)

    try:
        anyio.run(evaluate_all)
    except KeyboardInterrupt:  # Ctrl-C or `timeout -s INT`: report what finished; a re-run resumes
        notes.append("interrupted: the summary covers the problems finished so far; run again to resume")
    done = load_results(out_dir)
    results = [done[i.key] for i in items if i.key in done]
    lost = [i.key for i in items if i.key not in done]
    if lost:
        notes.append(f"no result for {len(lost)} problem(s) (a worker died?): {', '.join(lost[:10])}")
    summary = aggregate(results, problems_dir=str(problems_dir), solutions_dir=str(solutions_dir),
                        mode="interpreter" if interpreter else "gpu", orphans=orphans, notes=notes)
    summary.wall_s = round(time.monotonic() - t0, 2)
    write_outputs(summary, out_dir)
    return summary


def _run_sharded(todo: Sequence[BenchItem], out_dir: Path, config: ServerConfig, n_gpus: int,
                 progress: Progress) -> None:
    """One `python -m egg_mcp.e2e.bench --shard` process per GPU, each with CUDA_VISIBLE_DEVICES set to
    its device (its engine workers inherit it); progress is read from their result files."""
    shard_dir = out_dir / "shards"
    shard_dir.mkdir(parents=True, exist_ok=True)
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    devices = visible[:n_gpus] if visible else [str(i) for i in range(n_gpus)]
    procs = []
    before = {p: _count_lines(p) for p in out_dir.glob(RESULTS_GLOB)}
    for i, dev in enumerate(devices):
        share = list(todo[i::len(devices)])
        if not share:
            continue
        spec = shard_dir / f"gpu{dev}.json"
        spec.write_text(json.dumps({
            "items": [it.model_dump() for it in share],
            "results": str(out_dir / f"results.gpu{dev}.jsonl"),
            "scratch": str(config.workspace / "scratch" / f"bench-gpu{dev}"),
        }))
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=dev)
        env["PYTHONPATH"] = PACKAGE_PARENT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        log = (shard_dir / f"gpu{dev}.log").open("w")
        procs.append((subprocess.Popen([sys.executable, "-m", "egg_mcp.e2e.bench", "--shard", str(spec)], env=env,
                                       stdout=log, stderr=subprocess.STDOUT), log))
    seen: set[tuple[str, str]] = set()
    try:
        while True:
            running = any(p.poll() is None for p, _ in procs)
            for path in out_dir.glob(RESULTS_GLOB):
                lines = path.read_text().splitlines()[before.get(path, 0):]
                for line in lines:
                    try:
                        r = ProblemResult.model_validate_json(line)
                    except ValueError:
                        continue
                    if (path.name, r.key) not in seen:
                        seen.add((path.name, r.key))
                        progress.update(r)
            if not running:
                break
            time.sleep(0.5)
    finally:
        for p, log in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=30)
            log.close()
    failed = [(p.args, p.returncode) for p, _ in procs if p.returncode]
    for args, code in failed:
        print(f"bench worker {args[-1]} exited with {code}; see its .log next to it", file=sys.stderr)


def _count_lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def _run_shard(spec_path: Path) -> int:
    """Worker side of `_run_sharded`: evaluate this GPU's share with its own engine."""
    import anyio

    spec = json.loads(spec_path.read_text())
    items = [BenchItem.model_validate(i) for i in spec["items"]]
    config = ServerConfig()
    evaluator = _make_evaluator(config, Path(spec["scratch"]))

    async def main():
        try:
            await evaluate_items(evaluator, items, Path(spec["results"]), interpreter=False)
        finally:
            await _aclose(evaluator)

    anyio.run(main)
    return 0


def run_bench_cli(args: argparse.Namespace, config: ServerConfig) -> int:
    """Entry point of `egg-mcp bench`."""
    problems = args.problems or config.kernelbench_dir
    if problems is None:
        print("bench needs the problems: pass --problems FOLDER or --kernelbench-dir /path/to/KernelBench",
              file=sys.stderr)
        return 2
    try:
        summary = run_bench(Path(problems), Path(args.solutions), Path(args.out), config=config, levels=args.level)
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    print(render_markdown(summary))
    print(f"wrote {args.out}/summary.json, summary.md" + (", speedups.png" if (Path(args.out) / "speedups.png").exists()
                                                           else ""), file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m egg_mcp.e2e.bench --shard SPEC` (a GPU shard of `_run_sharded`); never imports the CLI."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 2 and argv[0] == "--shard":
        return _run_shard(Path(argv[1]))
    print("this module's entry point only runs bench shards; run `egg-mcp bench` (python -m egg_mcp bench)",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["run_bench", "run_bench_cli", "fast_p", "geomean", "summarise", "aggregate", "discover", "BenchSummary",
           "ProblemResult"]
