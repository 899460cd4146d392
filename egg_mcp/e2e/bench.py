"""`egg-mcp bench`: evaluate a folder of solutions against KernelBench-format problems.

Per problem: verdict, time, eager and torch.compile baseline times, speedups; overall and per
level: correctness rate, fast_p (KernelBench: the fraction of ALL problems that are correct AND
faster than p x the eager baseline; a problem without a solution file counts as not correct),
geometric-mean speedups over the correct problems. Output in `--out`: `results.jsonl` (one line per
problem, appended as it finishes: a re-run skips problems whose problem and solution are unchanged),
`summary.json`, `summary.md` and `speedups.png`.

Every evaluation goes through the engine: solutions run in isolated worker processes, never in this
one. With GPUs, the evaluator is the same `LanePool` as `serve`'s (`egg_mcp.cluster`): one lane per GPU
of this host, or per GPU of a Ray cluster with `--ray`; problems are evaluated side by side, each
candidate timed alone on one device, baselines measured once per problem and GPU model. Inputs
(discovery, options, resume): `bench_items.py`; the progress bar: `bench_progress.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

from egg_mcp.config import ServerConfig
from egg_mcp.contract import Evaluator
from egg_mcp.e2e.bench_items import BenchError, BenchItem, discover, eval_options, pending, problem_sha
from egg_mcp.e2e.bench_progress import Progress, per_hour
from egg_mcp.e2e.bench_report import render_markdown, write_outputs
from egg_mcp.e2e.bench_results import (
    BenchSummary,
    ProblemResult,
    aggregate,
    append_result,
    fingerprint,
    load_results,
    ratio,
)

BaselineCache = dict[tuple[str, str | None], tuple[float | None, float | None, str | None]]
"""(problem sha, GPU model) -> (eager ms, compile ms, compile error): two GPU models never share a baseline."""


def baseline_cache_from(results: Iterable[ProblemResult]) -> BaselineCache:
    """Baselines measured on the GPU by an earlier run, reusable for an unchanged problem on the same model."""
    return {(r.problem_sha, r.device): (r.eager_ms, r.compile_ms, None) for r in results
            if r.problem_sha and r.mode == "gpu" and r.eager_ms is not None}


async def evaluate_item(evaluator: Evaluator, item: BenchItem, *, interpreter: bool,
                        baseline_cache: BaselineCache | None = None,
                        baseline_locks: dict | None = None) -> ProblemResult:
    """Evaluate one problem's solution (and, when it is correct and timed, the baselines: once per
    problem source and GPU model, through `baseline_cache`; concurrent items wait for one measurement)."""
    t0 = time.monotonic()
    problem_source = Path(item.problem_path).read_text()
    mode = "interpreter" if interpreter else "gpu"
    base: dict[str, Any] = dict(key=item.key, level=item.level, name=item.name, mode=mode,
                                problem_sha=problem_sha(problem_source))
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
            key = (problem_sha(problem_source), result.env.device if result.env else None)
            async with (baseline_locks if baseline_locks is not None else {}).setdefault(key, asyncio.Lock()):
                if key not in cache:
                    baselines = await evaluator.baselines(problem_source, options)
                    cache[key] = (baselines.eager.median_ms if baselines.eager else None,
                                  baselines.compiled.median_ms if baselines.compiled else None,
                                  baselines.compile_error or baselines.unavailable_reason)
            eager_ms, compile_ms, baseline_error = cache[key]
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
        ran_on=result.placement.label() if result.placement else None, wall_s=round(time.monotonic() - t0, 2),
    )


async def evaluate_items(evaluator: Evaluator, items: Sequence[BenchItem], results_path: Path, *,
                         interpreter: bool, progress: Progress | None = None,
                         baseline_cache: BaselineCache | None = None, concurrency: int = 1) -> list[ProblemResult]:
    """Evaluate the items, `concurrency` at a time (a `LanePool` gives every candidate an idle device of
    its own; one lane: one at a time), appending each result as it finishes."""
    cache = (baseline_cache if baseline_cache is not None
             else baseline_cache_from(load_results(results_path.parent).values()))
    locks: dict = {}
    gate = asyncio.Semaphore(max(1, concurrency))
    out: list[ProblemResult] = []

    async def one(item: BenchItem) -> None:
        async with gate:
            r = await evaluate_item(evaluator, item, interpreter=interpreter, baseline_cache=cache,
                                    baseline_locks=locks)
        append_result(results_path, r)
        out.append(r)
        if progress:
            progress.update(r)

    await asyncio.gather(*(one(item) for item in items))
    return out


def lane_count(evaluator) -> int:
    lanes = getattr(evaluator, "lanes", None)
    return len(lanes) if lanes else 1


def _make_evaluator(config: ServerConfig, scratch: Path, ray_address: str | None = None, max_lanes: int | None = None,
                    protect: Iterable[Path] = ()):
    """The engine serve would build: runners held to the same sandbox floor, and no grant exposing the workspace,
    the allowed folders or `protect` (bench's own folders). Below the floor nothing runs (BenchError says why)."""
    from egg_mcp.cluster.build import build_evaluator  # lazily: the engine is heavy and optional here
    from egg_mcp.sandbox.floor import runner_guards

    floor, guarded = runner_guards(config, protect)
    if not floor.runs_candidates:
        raise BenchError(floor.refusal("run the solutions"))
    return build_evaluator(scratch, force_interpreter=config.force_interpreter, ray_address=ray_address,
                           max_lanes=max_lanes, protect=guarded, sandbox_required=floor.required)


async def _aclose(evaluator) -> None:
    close = getattr(evaluator, "aclose", None)
    if close is not None:
        await close()


def run_bench(problems_dir: Path, solutions_dir: Path, out_dir: Path, *, config: ServerConfig,
              levels: Iterable[str] = (), evaluator: Evaluator | None = None, gpus: int | None = None,
              show_progress: bool = True, ray_address: str | None = None) -> BenchSummary:
    """Evaluate, resume, aggregate and write the outputs. `evaluator` (tests) bypasses the engine;
    `gpus` caps the local lanes; `ray_address` evaluates on a Ray cluster's lanes."""
    import anyio

    t0 = time.monotonic()
    items, orphans = discover(problems_dir, solutions_dir, levels)
    out_dir.mkdir(parents=True, exist_ok=True)
    own = evaluator is None
    if evaluator is None:
        evaluator = _make_evaluator(config, config.scratch_dir() / "bench", ray_address or config.ray_address,
                                    gpus, protect=(problems_dir, solutions_dir, out_dir))
    interpreter = config.force_interpreter or not evaluator.has_gpu()
    todo = pending(items, load_results(out_dir), interpreter=interpreter)
    notes = []
    if interpreter:
        notes.append("CPU interpreter: correctness only at the problems' QUICK_SIZES (or sizes derived from their "
                     "constants); timings and fast_p need a GPU")
    skipped = len(items) - len(todo)
    if skipped:
        notes.append(f"{skipped} problem(s) reused from an earlier run in {out_dir} (unchanged problem and solution)")
    lanes = lane_count(evaluator)
    if lanes > 1:
        where = "Ray cluster" if (ray_address or config.ray_address) else "this host"
        notes.append(f"{lanes} lanes ({where}): problems side by side, each candidate timed alone on one GPU")
    if show_progress:
        print(f"bench: {len(items)} problem(s), {len(todo)} to evaluate ({'interpreter' if interpreter else 'GPU'}, "
              f"{lanes} lane(s))", file=sys.stderr)
    progress = Progress(len(todo), enabled=show_progress, lanes=lanes)

    async def evaluate_all() -> None:
        # one event loop for the evaluator's whole life: its workers belong to the loop that started them
        try:
            if todo:
                await evaluate_items(evaluator, todo, out_dir / "results.jsonl", interpreter=interpreter,
                                     progress=progress, concurrency=lanes + 1 if lanes > 1 else 1)
        finally:
            if own:
                await _aclose(evaluator)

    try:
        anyio.run(evaluate_all)
    except KeyboardInterrupt:  # Ctrl-C or `timeout -s INT`: report what finished; a re-run resumes
        notes.append("interrupted: the summary covers the problems finished so far; run again to resume")
    rate = progress.throughput()
    if rate:
        notes.append(f"throughput {rate:.0f} candidates/hour on {lanes} lane(s) (measured in this run: "
                     f"{progress.done} in {time.monotonic() - progress.t0:.0f} s)")
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


def run_bench_cli(args: argparse.Namespace, config: ServerConfig) -> int:
    """Entry point of `egg-mcp bench`."""
    problems = args.problems or config.kernelbench_dir
    if problems is None:
        print("bench needs the problems: pass --problems FOLDER or --kernelbench-dir /path/to/KernelBench",
              file=sys.stderr)
        return 2
    from egg_mcp.cluster.ray_lanes import ClusterError

    try:
        summary = run_bench(Path(problems), Path(args.solutions), Path(args.out), config=config, levels=args.level)
    except (BenchError, ClusterError) as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    print(render_markdown(summary))
    print(f"wrote {args.out}/summary.json, summary.md" + (", speedups.png" if (Path(args.out) / "speedups.png").exists()
                                                           else ""), file=sys.stderr)
    return 0


__all__ = ["run_bench", "run_bench_cli", "aggregate", "discover", "BenchSummary", "ProblemResult", "Progress",
           "per_hour"]
