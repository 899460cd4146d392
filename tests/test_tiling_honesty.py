"""propose_tiling never makes things worse (issue 30, item 3): it recommends only a config measured faster than the
measured current one beyond noise and then re-verified through verify; it never rewrites a value outside its
tunables; it spends the budget it was given and says where the time went; it reports exactly what it measured."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Mapping

from egg_mcp.contract import EvalOptions, EvalResult, JobOutcome, TimingStats
from egg_mcp.hardware import GPU_TABLE
from egg_mcp.problems.builtin import builtin_source
from egg_mcp.tiling.measure_call import RETURN_MARGIN_S, reverify_reserve
from egg_mcp.tiling.rewrite import apply_config
from egg_mcp.tiling.search import propose_tiling
from tests.test_tiling_launch_meaning import PHASED
from tests.test_tiling_measure import CANDIDATE, run_worker

H200 = GPU_TABLE["H200"]


class Bench:
    """A GPU engine double: the measuring job answers each config (by BLOCK) with `times` (None: wrong output;
    missing: picked but not measured, as the worker says when the budget ran out); evaluate answers the current
    source and any other source (the winner's) with `verify` = {"current"|"winner": (verdict, ms)}."""

    def __init__(self, times: Mapping[int, float | None], verify=None, drop_baseline=False, job_extra=None):
        self.times, self.verify, self.drop_baseline = times, verify or {}, drop_baseline
        self.job_extra = job_extra or {}
        self.payloads: list[dict] = []
        self.evaluated: list[str] = []

    def has_gpu(self) -> bool:
        return True

    async def run_job(self, target, payload, *, timeout_s, uses_gpu, wrapper_argv=None):
        assert target == "egg_mcp.tiling.measure:measure_configs" and uses_gpu
        self.payloads.append(payload)
        current = [c["config"] for c in payload["candidates"]]
        baseline = [] if self.drop_baseline else current
        picked = [c for c, _ in payload["adaptive"]["ranked"] if c not in current][:payload["adaptive"]["max_trials"]]
        results = []
        for config in baseline + picked:
            if config["BLOCK"] not in self.times:
                results.append({"config": {"values": config}, "error_kind": "not_measured",
                                "error": "not measured: the job's time budget was spent"})
                continue
            ms = self.times[config["BLOCK"]]
            results.append({"config": {"values": config}, "median_ms": ms, "correct": ms is not None,
                            "timing_cv": 0.01, "timing_runs": 100,
                            **({} if ms is not None else {"error_kind": "incorrect", "error": "max abs error 1"})})
        return JobOutcome(ok=True, result={"results": results, "device": "fake", "compile_mode": "fork",
                                           "compile_wall_s": 1.0, "measure_wall_s": 2.0, "wall_s": 4.0,
                                           "started_unix": time.time(), "deadline_used": True,
                                           "stopped_by": "max_trials", **self.job_extra})

    async def evaluate(self, reference_source, candidate_source, options, progress=None):
        self.evaluated.append(candidate_source)
        verdict, ms = self.verify["current" if candidate_source == PHASED else "winner"]
        return EvalResult(verdict=verdict, summary=f"{verdict} (double)", correctness_trials=5,
                          correctness_trials_passed=5 if verdict == "correct" else 2,
                          timing=TimingStats(median_ms=ms, cv=0.01, n_runs=100) if ms is not None else None)


def _propose(bench: Bench, **kwargs):
    args = {"max_trials": 4, "time_budget_s": 40.0, **kwargs}
    return asyncio.run(propose_tiling(
        bench, reference_source="ref", candidate_source=PHASED, options=EvalOptions(), gpu=H200, dims={"n": 4096},
        kind="elementwise", **args))


FAST = {256: 2.0, 64: 1.0, 128: 1.5, 512: 2.2, 1024: 2.4, 2048: 2.6, 4096: 2.8}


def test_a_winner_is_re_verified_and_recommended_only_when_verify_agrees():
    bench = Bench(FAST, verify={"current": ("correct", 2.0), "winner": ("correct", 1.0)})
    proposal = _propose(bench)
    assert proposal.recommended is not None and proposal.recommended.values == {"BLOCK": 64}
    assert bench.evaluated == [PHASED, apply_config(PHASED, {"BLOCK": 64})]  # the current source, then the winner's
    assert proposal.recommended_source == bench.evaluated[1]
    assert proposal.reverified is not None and proposal.reverified.confirmed
    assert proposal.reverified.winner_ms == 1.0 and proposal.reverified.current_ms == 2.0
    assert "re-verified correct on 5 of 5 trials" in proposal.recommended_reason
    assert "verify" in proposal.time_s


def test_a_winner_that_fails_re_verification_is_not_recommended():
    proposal = _propose(Bench(FAST, verify={"current": ("correct", 2.0), "winner": ("incorrect", None)}))
    assert proposal.recommended is None and proposal.recommended_source is None
    assert proposal.reverified is not None and not proposal.reverified.confirmed
    assert proposal.reverified.verdict == "incorrect"
    assert proposal.recommended_reason.startswith("keep the current config: the measured winner {'BLOCK': 64} "
                                                  "failed re-verification (incorrect")


def test_a_winner_verify_times_slower_than_the_current_source_is_not_recommended():
    """The client run's numbers: the winner verified at 2.865 ms against the committed 1.269 ms."""
    proposal = _propose(Bench(FAST, verify={"current": ("correct", 1.269), "winner": ("correct", 2.865)}))
    assert proposal.recommended is None and proposal.recommended_source is None
    assert "verify times it at 2.8650 vs 1.2690 ms for the current source" in proposal.recommended_reason
    assert proposal.recommended_reason.startswith("keep the current config")


def test_within_noise_of_the_current_config_it_keeps_it_and_verifies_nothing():
    bench = Bench({block: max(ms, 1.99) for block, ms in FAST.items()})
    proposal = _propose(bench)
    assert proposal.recommended is None and bench.evaluated == [] and proposal.reverified is None
    assert proposal.recommended_reason.startswith("keep the current config: no measured config beat it")


def test_without_a_measured_current_config_nothing_is_recommended():
    bench = Bench(FAST, drop_baseline=True)
    proposal = _propose(bench)
    assert proposal.measured and proposal.recommended is None and bench.evaluated == []
    assert "the current config was not measured" in proposal.recommended_reason


def test_configs_the_budget_left_unmeasured_are_neither_counted_nor_ranked_as_measured():
    """The client run: 'fastest of 4 measured configs' with three of them 'not measured'."""
    bench = Bench({256: 2.0, 64: 1.0}, verify={"current": ("correct", 2.0), "winner": ("correct", 1.0)},
                  job_extra={"stopped_by": "budget"})
    proposal = _propose(bench)
    assert proposal.trials_used == 2
    assert [r.config.values for r in proposal.ranked if r.measured_ms is not None] == [{"BLOCK": 64}, {"BLOCK": 256}]
    assert all(r.error is None or "not measured" not in r.error for r in proposal.ranked)
    assert len(proposal.not_measured) == 2 and proposal.stopped_by == "budget"
    assert "fastest of the 2 configs measured" in proposal.recommended_reason
    assert "2 more picked but not measured (the budget ran out)" in proposal.note
    assert "the current config (the unchanged source)" in proposal.ranked[1].notes


def test_the_budget_is_the_callers_whole_and_the_reply_says_where_it_went():
    bench = Bench(FAST, verify={"current": ("correct", 2.0), "winner": ("correct", 1.0)})
    sent = time.time()
    proposal = _propose(bench, time_budget_s=40.0, spent_s=2.0)
    payload = bench.payloads[0]
    left = 40.0 - 2.0  # the probe's 2 s came out of the budget, nothing else did (no assumed start-up)
    assert abs(payload["deadline_unix"] - sent - (left - reverify_reserve(left) - RETURN_MARGIN_S)) < 1.0
    t = proposal.time_s
    assert {"budget", "probe", "model", "start", "compile", "measure", "job_other", "return", "verify", "total",
            "left"} <= t.keys()
    assert t["budget"] == 40.0 and t["probe"] == 2.0 and t["compile"] == 1.0 and t["measure"] == 2.0
    assert t["job_other"] == 1.0 and abs(t["left"] - (40.0 - t["total"])) < 1e-6 and t["total"] >= 2.0
    assert "check and time 2.0 s" in proposal.note and "stopped by max_trials" in proposal.note


def test_a_job_that_could_not_use_the_deadline_says_so():
    bench = Bench(FAST, job_extra={"deadline_used": False, "time_budget_s": 10.0})
    proposal = _propose(bench)
    assert any("could not measure to the budget's deadline" in w and "assumed 30 s" in w for w in proposal.warnings)


def test_a_phase_passed_as_different_literals_is_excluded_and_never_rewritten():
    """The client run: PHASE set to one value at three launch sites, verified on the GPU, committed."""
    bench = Bench(FAST, verify={"current": ("correct", 2.0), "winner": ("correct", 1.0)})
    proposal = _propose(bench)
    assert "PHASE" in proposal.excluded and "different literals" in proposal.excluded["PHASE"]
    assert all("PHASE" not in c["config"] for c in bench.payloads[0]["candidates"])
    assert all("PHASE" not in c for c, _ in bench.payloads[0]["adaptive"]["ranked"])
    source = proposal.recommended_source
    assert source is not None and all(f"PHASE={i}, BLOCK=64" in source for i in range(3))
    from egg_mcp.server.measure_tools import TilingResult
    from egg_mcp.surface.summaries import summary_text

    text = summary_text("propose_tiling", TilingResult(task_id="t", candidate_id="c", report_id="r", proposal=proposal,
                                                       next_step="verify"))
    assert "not tuned (never rewritten): PHASE" in text


def test_the_worker_marks_configs_it_never_reached_as_not_measured(tmp_path):
    """On the CPU interpreter, with the budget spent before the first config: nothing is timed, and nothing that
    was not measured reads as a failure of its own."""
    configs = [{"BLOCK": 128, "NUM_WARPS": 4}, {"BLOCK": 256, "NUM_WARPS": 4}]
    result = run_worker({"reference_source": builtin_source("softmax"), "device": "interpreter",
                         "size_overrides": {"batch_size": 2, "dim": 100}, "time_budget_s": 0.0,
                         "candidates": [{"config": c, "source": apply_config(CANDIDATE, c)} for c in configs]},
                        tmp_path)
    assert [r["error_kind"] for r in result["results"]] == ["not_measured", "not_measured"]
    assert all(r["median_ms"] is None for r in result["results"])
    assert result["stopped_by"] == "budget" and result["deadline_used"] is False
    assert json.dumps(result)  # plain JSON back to the server


def test_a_module_constant_named_like_a_keyword_passed_as_different_literals_is_not_tuned_either():
    source = PHASED.replace("@triton.jit", "BLOCK = 256\n\n\n@triton.jit").replace(
        "PHASE=1, BLOCK=256", "PHASE=1, BLOCK=512").replace("triton.cdiv(n, 256)", "triton.cdiv(n, BLOCK)")
    from egg_mcp.tiling.space import extract_space

    space = extract_space(source, kind="elementwise", dims={"n": 4096})
    assert "BLOCK" not in {p.name for p in space.params}
    assert "module constant of its name is not tuned either" in space.excluded["BLOCK"]
