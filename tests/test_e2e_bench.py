"""`egg-mcp bench`: aggregation math, discovery, resume, outputs; the real engine on tiny fixtures (slow)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from egg_mcp.config import ServerConfig
from egg_mcp.contract import BaselineResult, EvalResult, TimingStats
from egg_mcp.e2e import bench
from egg_mcp.e2e.bench import BenchError, ProblemResult, aggregate, discover
from egg_mcp.e2e.bench_results import fast_p, geomean, summarise
from tests.conftest import FIXTURES, REPO

BENCH = FIXTURES / "bench"


def r(key: str, verdict: str = "correct", speedup: float | None = None, compile_speedup: float | None = None,
      level: str = "level1") -> ProblemResult:
    return ProblemResult(key=f"{level}/{key}", level=level, name=key, verdict=verdict, speedup_vs_eager=speedup,
                         speedup_vs_compile=compile_speedup)


# -- pure aggregation ---------------------------------------------------------------------------------


def test_fast_p_counts_correct_and_faster_over_all_problems():
    results = [r("a", speedup=0.5), r("b", speedup=1.2), r("c", speedup=2.5), r("d", "incorrect"), r("e", "missing")]
    assert fast_p(results, 0) == pytest.approx(3 / 5)
    assert fast_p(results, 1) == pytest.approx(2 / 5)
    assert fast_p(results, 1.5) == pytest.approx(1 / 5)
    assert fast_p(results, 2) == pytest.approx(1 / 5)
    assert fast_p(results, 3) == 0.0


def test_fast_p_is_strictly_greater_than_p():
    assert fast_p([r("a", speedup=1.0)], 1.0) == 0.0
    assert fast_p([r("a", speedup=1.0001)], 1.0) == 1.0


def test_fast_p_unknown_without_any_timing():
    assert fast_p([r("a"), r("b", "incorrect")], 0) is None
    assert fast_p([], 1) is None


def test_fast_p_ignores_speedup_of_incorrect_results():
    # an incorrect kernel with a (bogus) speedup never counts
    assert fast_p([r("a", "incorrect", speedup=5.0), r("b", speedup=0.9)], 0) == pytest.approx(0.5)


def test_fast_p_vs_compile_uses_the_compile_speedup():
    results = [r("a", speedup=3.0, compile_speedup=0.8), r("b", speedup=3.0, compile_speedup=1.6)]
    assert fast_p(results, 1, "compile") == pytest.approx(0.5)
    assert fast_p(results, 1, "eager") == 1.0


def test_geomean():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([1.5]) == pytest.approx(1.5)
    assert geomean([None, 2.0, 0.0, 0.5]) == pytest.approx(1.0)  # None and non-positive are skipped
    assert geomean([]) is None and geomean([None]) is None


def test_summarise_and_per_level():
    results = [r("a", speedup=2.0, compile_speedup=1.0), r("b", speedup=0.5, compile_speedup=0.25),
               r("c", "incorrect", speedup=None), r("x", speedup=4.0, compile_speedup=2.0, level="level2"),
               r("y", "missing", level="level2")]
    s = aggregate(results)
    assert s.overall.n == 5 and s.overall.correct == 3 and s.overall.missing == 1
    assert s.overall.correctness_rate == pytest.approx(0.6)
    assert s.overall.geomean_speedup_vs_eager == pytest.approx((2.0 * 0.5 * 4.0) ** (1 / 3))
    assert s.overall.fast_p["1"] == pytest.approx(2 / 5)
    assert list(s.levels) == ["level1", "level2"]
    l1, l2 = s.levels["level1"], s.levels["level2"]
    assert (l1.n, l1.correct, l1.timed) == (3, 2, 2)
    assert l1.geomean_speedup_vs_eager == pytest.approx(1.0)
    assert l1.geomean_speedup_vs_compile == pytest.approx(math.sqrt(0.25))
    assert l2.fast_p["2"] == pytest.approx(0.5) and l2.fast_p_vs_compile["2"] == 0.0
    assert l1.verdicts == {"correct": 2, "incorrect": 1}


def test_summarise_empty_group():
    g = summarise([])
    assert g.n == 0 and g.correctness_rate is None and g.fast_p["0"] is None and g.geomean_speedup_vs_eager is None


# -- discovery -------------------------------------------------------------------------------------------


def test_discover_fixture_levels_and_flat_solutions():
    items, orphans = discover(BENCH / "problems", BENCH / "solutions")
    keys = {i.key: i for i in items}
    assert set(keys) == {"level1/1_Softmax", "level1/2_AddRelu", "level1/3_RowSum", "level2/1_ScaleSigmoid"}
    assert keys["level1/2_AddRelu"].solution_path.endswith("solutions/2_AddRelu.py")
    assert keys["level2/1_ScaleSigmoid"].level == "level2"
    assert orphans == []
    only2, _ = discover(BENCH / "problems", BENCH / "solutions", ["2"])
    assert [i.key for i in only2] == ["level2/1_ScaleSigmoid"]


def test_discover_kernelbench_layout_missing_and_orphans(tmp_path):
    probs = tmp_path / "kb" / "KernelBench" / "level1"
    probs.mkdir(parents=True)
    for name in ("1_A", "2_B"):
        (probs / f"{name}.py").write_text((BENCH / "problems" / "level1" / "2_AddRelu.py").read_text())
    sols = tmp_path / "sols"
    sols.mkdir()
    (sols / "1_A.py").write_text("class ModelNew: pass\n")
    (sols / "99_Stray.py").write_text("class ModelNew: pass\n")
    items, orphans = discover(tmp_path / "kb", sols)
    assert [(i.key, i.solution_path is not None) for i in items] == [("level1/1_A", True), ("level1/2_B", False)]
    assert orphans == [str(sols / "99_Stray.py")]


def test_discover_errors_say_what_to_pass(tmp_path):
    with pytest.raises(BenchError, match="solutions folder"):
        discover(BENCH / "problems", tmp_path / "nope")
    with pytest.raises(BenchError, match="--problems"):
        discover(tmp_path / "nope", BENCH / "solutions")
    with pytest.raises(BenchError, match="level"):
        discover(BENCH / "problems", BENCH / "solutions", ["lvl1"])


# -- resume and outputs, with an evaluator double ----------------------------------------------------------


class FakeEvaluator:
    """Verdict and time from a marker line in the solution: `# fake: correct 2.0`."""

    def __init__(self, gpu: bool = True):
        self.gpu = gpu
        self.evaluated: list[str] = []
        self.baseline_calls = 0

    def has_gpu(self) -> bool:
        return self.gpu

    async def evaluate(self, reference_source, candidate_source, options, progress=None):
        marker = next(line for line in candidate_source.splitlines() if line.startswith("# fake:"))
        verdict, t = marker.split()[2], float(marker.split()[3])
        self.evaluated.append(candidate_source)
        timing = TimingStats(median_ms=t) if verdict == "correct" and options.timing else None
        return EvalResult(verdict=verdict, summary=f"fake {verdict}", timing=timing,  # pyright: ignore[reportArgumentType]  # (the marker's)
                          timing_unavailable_reason=None if timing else "fake: no timing")

    async def baselines(self, reference_source, options, progress=None):
        self.baseline_calls += 1
        return BaselineResult(eager=TimingStats(median_ms=4.0), compiled=TimingStats(median_ms=2.0))


def _fake_set(tmp_path: Path) -> tuple[Path, Path]:
    probs, sols = tmp_path / "problems", tmp_path / "solutions"
    probs.mkdir()
    sols.mkdir()
    ref = (BENCH / "problems" / "level1" / "2_AddRelu.py").read_text()
    for name, marker in (("1_fast", "correct 1.0"), ("2_slow", "correct 8.0"), ("3_wrong", "incorrect 0"),
                         ("4_nosolution", None)):
        (probs / f"{name}.py").write_text(ref)
        if marker:
            (sols / f"{name}.py").write_text(f"# fake: {marker}\nclass ModelNew: pass\n")
    return probs, sols


def test_run_bench_resumes_and_writes_outputs(tmp_path):
    probs, sols = _fake_set(tmp_path)
    out = tmp_path / "out"
    config = ServerConfig(workspace=tmp_path / "ws")
    fake = FakeEvaluator()
    s = bench.run_bench(probs, sols, out, config=config, evaluator=fake, show_progress=False)  # pyright: ignore[reportArgumentType]  # a fake Evaluator
    assert len(fake.evaluated) == 3
    assert fake.baseline_calls == 1  # every fake problem has the same reference: its baselines are measured once
    by = {x.key: x for x in s.results}
    assert by["1_fast"].speedup_vs_eager == pytest.approx(4.0) and by["1_fast"].speedup_vs_compile == pytest.approx(2.0)
    assert by["2_slow"].speedup_vs_eager == pytest.approx(0.5)
    assert by["4_nosolution"].verdict == "missing"
    assert s.overall.n == 4 and s.overall.fast_p["1"] == pytest.approx(1 / 4)
    assert s.overall.geomean_speedup_vs_eager == pytest.approx(math.sqrt(4.0 * 0.5))
    for name in ("summary.json", "summary.md", "speedups.png", "results.jsonl"):
        assert (out / name).is_file(), name
    assert json.loads((out / "summary.json").read_text())["overall"]["correct"] == 2
    assert "| 1_fast | correct |" in (out / "summary.md").read_text()

    # a second run evaluates nothing; changing one solution re-runs only that one
    again = FakeEvaluator()
    bench.run_bench(probs, sols, out, config=config, evaluator=again, show_progress=False)  # pyright: ignore[reportArgumentType]  # a fake Evaluator
    assert again.evaluated == []
    (sols / "2_slow.py").write_text("# fake: correct 2.0\nclass ModelNew: pass\n")
    third = FakeEvaluator()
    s3 = bench.run_bench(probs, sols, out, config=config, evaluator=third, show_progress=False)  # pyright: ignore[reportArgumentType]  # a fake Evaluator
    assert len(third.evaluated) == 1 and third.baseline_calls == 0  # reused from the results of the first run
    assert {x.key: x for x in s3.results}["2_slow"].speedup_vs_eager == pytest.approx(2.0)


def test_results_with_a_cut_line_rerun_that_problem(tmp_path):
    probs, sols = _fake_set(tmp_path)
    out = tmp_path / "out"
    config = ServerConfig(workspace=tmp_path / "ws")
    bench.run_bench(probs, sols, out, config=config, evaluator=FakeEvaluator(), show_progress=False)  # pyright: ignore[reportArgumentType]  # a fake Evaluator
    lines = (out / "results.jsonl").read_text().splitlines()
    cut = [line if json.loads(line)["key"] != "1_fast" else line[:25] for line in lines]  # killed mid-write
    (out / "results.jsonl").write_text("\n".join(cut) + "\n")
    again = FakeEvaluator()
    bench.run_bench(probs, sols, out, config=config, evaluator=again, show_progress=False)  # pyright: ignore[reportArgumentType]  # a fake Evaluator
    assert again.evaluated == [(sols / "1_fast.py").read_text()]


def test_interpreter_mode_has_no_speedups_and_uses_quick_sizes(tmp_path):
    probs, sols = _fake_set(tmp_path)
    config = ServerConfig(workspace=tmp_path / "ws", force_interpreter=True)
    s = bench.run_bench(probs, sols, tmp_path / "out", config=config, evaluator=FakeEvaluator(gpu=False),  # pyright: ignore[reportArgumentType]  # a fake Evaluator
                        show_progress=False)
    assert s.mode == "interpreter"
    assert s.overall.fast_p["0"] is None and s.overall.geomean_speedup_vs_eager is None
    assert s.overall.correct == 2
    assert all(x.size_overrides == {"batch_size": 8, "dim": 300} for x in s.results if x.verdict != "missing")
    assert not (tmp_path / "out" / "speedups.png").exists()


def test_cli_usage_errors(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "egg_mcp", "bench", str(BENCH / "solutions"), "--workspace",
                           str(tmp_path / "ws")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--problems" in proc.stderr


# -- the real engine, CPU interpreter ---------------------------------------------------------------------


@pytest.mark.slow
def test_bench_fixtures_with_the_engine_on_the_interpreter(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "egg_mcp", "bench", str(BENCH / "solutions"), "--problems", str(BENCH / "problems"),
         "--out", str(out), "--workspace", str(tmp_path / "ws"), "--interpreter"],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    verdicts = {x["key"]: x["verdict"] for x in summary["results"]}
    assert verdicts["level1/1_Softmax"] == "correct"
    assert verdicts["level1/2_AddRelu"] == "correct"
    assert verdicts["level1/3_RowSum"] == "incorrect"
    assert verdicts["level2/1_ScaleSigmoid"] in ("compile_error", "runtime_error")
    assert summary["overall"]["correct"] == 2 and summary["overall"]["correctness_rate"] == pytest.approx(0.5)
    assert summary["levels"]["level2"]["correct"] == 0
    assert "1_Softmax" in proc.stdout and "4/4" in proc.stderr
    # resumable: nothing left to do
    again = subprocess.run(
        [sys.executable, "-m", "egg_mcp", "bench", str(BENCH / "solutions"), "--problems", str(BENCH / "problems"),
         "--out", str(out), "--workspace", str(tmp_path / "ws"), "--interpreter"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "0 to evaluate" in again.stderr


def test_lanes_evaluate_problems_side_by_side_one_per_device(tmp_path):
    """bench with a LanePool (what several GPUs or --ray give): both lanes take problems, no lane runs
    two at once, the baselines are measured once per problem and GPU model, results say where they ran."""
    from egg_mcp.cluster.lanes import LanePool, LocalLane

    class SlowFake(FakeEvaluator):
        def __init__(self):
            super().__init__()
            self.running = self.max_running = 0

        async def evaluate(self, reference_source, candidate_source, options, progress=None):
            import asyncio

            self.running += 1
            self.max_running = max(self.max_running, self.running)
            await asyncio.sleep(0.05)
            self.running -= 1
            return await super().evaluate(reference_source, candidate_source, options, progress)

    probs, sols = _fake_set(tmp_path)
    fakes = [SlowFake(), SlowFake()]
    pool = LanePool([LocalLane(f, device_index=i, device_model="GPU-X", host="h") for i, f in enumerate(fakes)])
    s = bench.run_bench(probs, sols, tmp_path / "out", config=ServerConfig(workspace=tmp_path / "ws"),
                        evaluator=pool, show_progress=False)
    assert all(f.evaluated for f in fakes) and all(f.max_running == 1 for f in fakes)
    assert sum(f.baseline_calls for f in fakes) == 1
    ran = {x.key: x.ran_on for x in s.results if x.verdict != "missing"}
    assert all(r and "(GPU-X) via local" in r for r in ran.values()) and len(set(ran.values())) == 2
    assert any("2 lanes" in n for n in s.notes) and any("candidates/hour" in n for n in s.notes)


def test_progress_shows_throughput():
    import io

    stream = io.StringIO()
    p = bench.Progress(2, stream=stream, lanes=2)
    p.t0 -= 10.0  # ten seconds in
    p.update(ProblemResult(key="a", level="all", name="a", verdict="correct"))
    assert "1/2" in stream.getvalue() and "360/h on 2 lane(s)" in stream.getvalue()
    assert bench.per_hour(0, 5.0) is None and bench.per_hour(3, 3600.0) == 3.0


def test_bench_runs_solutions_under_serves_sandbox_floor_and_guards_its_folders(tmp_path, monkeypatch):
    """`egg-mcp bench` builds the engine serve builds: the same floor (below it nothing runs, with serve's
    refusal) and no runner grant exposing the workspace, allowed folders or bench's own folders."""
    from types import SimpleNamespace

    import egg_mcp.cluster.build as build
    import egg_mcp.sandbox.floor as floor_mod

    probs, sols = _fake_set(tmp_path)
    config = ServerConfig(workspace=tmp_path / "ws")
    weak = SimpleNamespace(runs_candidates=False, required=[],
                           refusal=lambda what="run candidates": f"this server does not {what}: below the floor")
    monkeypatch.setattr(floor_mod, "floor_for", lambda host, unsafe=None: weak)
    with pytest.raises(bench.BenchError, match="does not run the solutions: below the floor"):
        bench.run_bench(probs, sols, tmp_path / "out", config=config, show_progress=False)

    seen = {}

    def fake_build(scratch, **kwargs):
        seen.update(kwargs)
        return FakeEvaluator()

    met = SimpleNamespace(runs_candidates=True, required=["env_allowlist", "fs_confined"])
    monkeypatch.setattr(floor_mod, "floor_for", lambda host, unsafe=None: met)
    monkeypatch.setattr(build, "build_evaluator", fake_build)
    bench.run_bench(probs, sols, tmp_path / "out", config=config, show_progress=False)
    assert seen["sandbox_required"] == ["env_allowlist", "fs_confined"]
    assert {Path(p) for p in seen["protect"]} >= {tmp_path / "ws", probs, sols, tmp_path / "out"}
