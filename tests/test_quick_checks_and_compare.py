"""verify/profile size_overrides (quick checks), seed-stage next steps, briefs after commits, the
compare tool and its statistics, and propose_tiling's honesty on a CPU — against a fake evaluator."""

from __future__ import annotations

import asyncio
import random

import pytest

from egg_mcp.config import ServerConfig
from egg_mcp.contract import BaselineResult, ErrorReport, EvalResult, JobOutcome, MismatchReport, TimingStats
from egg_mcp.evaluation.interleaved import paired_verdict, sign_test_p
from egg_mcp.workflow.compare_candidates import compare_candidates, source_diff
from egg_mcp.workflow.models import StageDecision
from egg_mcp.workflow.service import EggService, WorkflowError, tiling
from egg_mcp.workspace.store import Workspace
from tests.conftest import FIXTURES

SEED_A = (FIXTURES / "softmax" / "row_per_program.py").read_text()
SEED_B = (FIXTURES / "softmax" / "online_blocked.py").read_text()
WRONG = (FIXTURES / "softmax" / "wrong_missing_max.py").read_text()


class FakeEvaluator:
    """Correct unless the source is WRONG; time 1 ms at the task's sizes, 0.01 ms at overridden ones."""

    def __init__(self, gpu: bool, ratios: list[float] | None = None):
        self.gpu = gpu
        self.ratios = ratios or []
        self.options = []
        self.jobs = []

    def has_gpu(self) -> bool:
        return self.gpu

    async def run_job(self, target, payload, *, timeout_s, uses_gpu, wrapper_argv=None):
        self.jobs.append((target, payload))
        if target == "egg_mcp.evaluation.interleaved:run_interleaved":
            assert uses_gpu
            n = len(self.ratios)
            return JobOutcome(ok=True, result={"check": {"a": "ok", "b": "ok"}, "times_a_ms": [1.0] * n,
                                               "times_b_ms": list(self.ratios), "ratios": list(self.ratios),
                                               "method": "fake", "device": "FakeGPU"})
        return JobOutcome(ok=False, error=ErrorReport(kind="fake", message="no reference analysis in this test"))

    async def baselines(self, reference_source, options, progress=None):
        return BaselineResult(eager=TimingStats(median_ms=4.0), compiled=TimingStats(median_ms=2.0))

    async def evaluate(self, reference_source, candidate_source, options, progress=None):
        self.options.append(options)
        if candidate_source == WRONG:
            return EvalResult(verdict="incorrect", summary="wrong", options=options,
                              mismatch=MismatchReport(max_abs_error=1.0))
        timing = TimingStats(median_ms=0.01 if options.size_overrides else 1.0) if self.gpu else None
        return EvalResult(verdict="correct", summary="ok", timing=timing, options=options)


def _service(tmp_path, gpu: bool, **kw) -> EggService:
    config = ServerConfig(workspace=tmp_path / "ws", force_interpreter=False)
    return EggService(config, Workspace(config.workspace), FakeEvaluator(gpu, **kw), None)


def _decision(text="d") -> StageDecision:
    return StageDecision(summary=text, changes=[text], rationale="test")


def test_quick_check_is_stored_apart_and_never_returned_as_the_full_size_result(tmp_path):
    async def main():
        svc = _service(tmp_path, gpu=True)
        tid = (await svc.start_task("softmax", k_seeds=1)).task_id
        full = await svc.verify(tid, SEED_A)
        quick = await svc.verify(tid, SEED_A, size_overrides={"dim": 37})
        assert not quick.cached and quick.candidate_id != full.candidate_id
        assert quick.size_overrides == {"dim": 37} and quick.time_ms is None
        assert isinstance(svc.evaluator, FakeEvaluator)
        assert svc.evaluator.options[-1].size_overrides == {"dim": 37}
        assert "verify it without size_overrides" in quick.next_step
        again_full = await svc.verify(tid, SEED_A)
        assert again_full.cached and again_full.candidate_id == full.candidate_id and again_full.time_ms == 1.0
        again_quick = await svc.verify(tid, SEED_A, size_overrides={"dim": 37})
        assert again_quick.cached and again_quick.candidate_id == quick.candidate_id
        # quick first, then full: the full-size verify runs, it does not get the quick result
        fresh = await svc.verify(tid, SEED_B, size_overrides={"batch_size": 3})
        full_b = await svc.verify(tid, SEED_B)
        assert not full_b.cached and full_b.candidate_id != fresh.candidate_id and full_b.size_overrides is None
        with pytest.raises(WorkflowError, match="only checked at the quick-check sizes"):
            await svc.commit_stage(tid, quick.candidate_id, _decision())
        with pytest.raises(WorkflowError, match=r"not module-level int constants of the reference; it has "
                                                r"\['batch_size', 'dim'\]"):
            await svc.verify(tid, SEED_A, size_overrides={"rows": 4})

    asyncio.run(main())


def test_seed_next_step_counts_correct_seeds_and_briefs_count_commits(tmp_path):
    async def main():
        svc = _service(tmp_path, gpu=False)
        tid = (await svc.start_task("softmax", k_seeds=2)).task_id
        first = await svc.verify(tid, SEED_A)
        assert "generate_seeds" not in first.next_step and "1 of 2 seeds verified correct" in first.next_step
        assert first.next_step.endswith(svc.status(tid).next_step)
        second = await svc.verify(tid, SEED_B)
        assert second.next_step.endswith("2 correct seeds (k=2): commit_stage with the fastest correct one")
        commit = await svc.commit_stage(tid, second.candidate_id, _decision("online seed"))
        assert "nothing committed yet" not in commit.brief
        assert "1 stage(s) committed, untimed" in commit.brief
        commit = await svc.commit_stage(tid, second.candidate_id, _decision("kept"), stage="ALGORITHM")
        assert "2 stage(s) committed, untimed" in commit.brief

    asyncio.run(main())


def test_seed_brief_describes_the_timing_verify_takes(tmp_path):
    from egg_mcp.contract import STRICT_FP32
    from egg_mcp.expertise.seeds import judging_rules

    speed = next(r for r in judging_rules(STRICT_FP32, None, 5) if r.startswith("Speed"))
    assert "L2 flushed between runs" not in speed
    assert "steady state" in speed and "back to back" in speed and "timing.isolated" in speed


def test_compare_on_cpu_returns_the_diff_and_says_timing_needs_a_gpu(tmp_path):
    async def main():
        svc = _service(tmp_path, gpu=False)
        tid = (await svc.start_task("softmax", k_seeds=2)).task_id
        a = (await svc.verify(tid, SEED_A)).candidate_id
        b = (await svc.verify(tid, SEED_B)).candidate_id
        out = await compare_candidates(svc, tid, a, b)
        assert out.verdict == "inconclusive" and out.timing_available is False and out.confidence is None
        assert "needs a GPU" in out.summary
        assert out.diff.startswith(f"--- {a} (A)") and out.diff_lines_changed > 0
        assert isinstance(svc.evaluator, FakeEvaluator)
        assert not [j for j in svc.evaluator.jobs if "interleaved" in j[0]]
        with pytest.raises(WorkflowError, match="same candidate"):
            await compare_candidates(svc, tid, a, a)
        bad = (await svc.verify(tid, WRONG)).candidate_id
        with pytest.raises(WorkflowError, match="needs a verified-correct candidate"):
            await compare_candidates(svc, tid, a, bad)

    asyncio.run(main())


def test_compare_on_a_gpu_runs_one_interleaved_job_and_gives_a_verdict(tmp_path):
    rng = random.Random(1)
    ratios = [0.95 + rng.uniform(-0.01, 0.01) for _ in range(20)]

    async def main():
        svc = _service(tmp_path, gpu=True, ratios=ratios)
        tid = (await svc.start_task("softmax", k_seeds=2)).task_id
        a = (await svc.verify(tid, SEED_A)).candidate_id
        b = (await svc.verify(tid, SEED_B)).candidate_id
        out = await compare_candidates(svc, tid, a, b, rounds=20)
        assert isinstance(svc.evaluator, FakeEvaluator)
        jobs = [p for t, p in svc.evaluator.jobs if t == "egg_mcp.evaluation.interleaved:run_interleaved"]
        assert len(jobs) == 1 and jobs[0]["source_a"] == SEED_A and jobs[0]["source_b"] == SEED_B
        assert jobs[0]["rounds"] == 20
        assert out.verdict == "faster" and out.confidence >= 0.95 and out.ci_high < 1
        assert "B is faster" in out.summary and out.device == "FakeGPU"

    asyncio.run(main())


def test_paired_verdict_on_synthetic_samples():
    rng = random.Random(0)
    slower = [1.04 + rng.gauss(0, 0.01) for _ in range(30)]
    out = paired_verdict(slower)
    assert out["verdict"] == "slower" and out["confidence"] > 0.99 and out["ci_low"] > 1
    noise = [1 + rng.gauss(0, 0.03) for _ in range(30)]
    assert paired_verdict(noise)["verdict"] == "inconclusive"
    # consistent but below the smallest effect called a difference
    tiny = [0.998 + rng.gauss(0, 0.0002) for _ in range(30)]
    out = paired_verdict(tiny)
    assert out["verdict"] == "inconclusive" and out["ci_high"] < 1
    faster = [0.9 + rng.gauss(0, 0.01) for _ in range(8)]
    assert paired_verdict(faster)["verdict"] == "faster"
    with pytest.raises(ValueError, match="at least 5"):
        paired_verdict([0.9, 0.9, float("nan"), 0.9])
    assert sign_test_p([0.9] * 10) == pytest.approx(2 / 2 ** 10)
    assert sign_test_p([0.9, 1.1] * 5) == 1.0


def test_source_diff_counts_changed_lines():
    diff, changed = source_diff("c-a", "x = 1\ny = 2\n", "c-b", "x = 1\ny = 3\n")
    assert "-y = 2" in diff and "+y = 3" in diff and changed == 2
    assert source_diff("a", "same\n", "b", "same\n") == ("", 0)


def test_propose_tiling_on_cpu_says_what_was_not_measured(tmp_path):
    async def main():
        svc = _service(tmp_path, gpu=False)
        tid = (await svc.start_task("softmax", k_seeds=1)).task_id
        cid = (await svc.verify(tid, SEED_B)).candidate_id
        for stage in ("SEEDS", "ALGORITHM", "PARALLEL_MAPPING"):  # -> TILING, the seed kept unchanged
            await svc.commit_stage(tid, cid, _decision(), stage=stage)
        _rid, proposal = await tiling(svc, tid, cid, max_trials=8, time_budget_s=60, measure=True,
                                      dims={"n_rows": 4096, "n_cols": 8192}, kind="softmax")
        assert not proposal.measured
        assert "measure=true, but there is no GPU here" in proposal.note
        assert "not requested" not in proposal.note
        t = proposal.time_s  # the launch probe's seconds came out of the call's budget, and say so
        assert t["budget"] == 60 and t["probe"] >= 0 and t["total"] >= t["probe"] and "left" in t

    asyncio.run(main())


def test_interleaved_job_refuses_to_time_without_cuda():
    import torch

    from egg_mcp.evaluation.interleaved import run_interleaved

    if torch.cuda.is_available():
        pytest.skip("this checks the CPU refusal")
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        run_interleaved({"reference_source": "", "source_a": "", "source_b": ""})


def test_profile_ncu_runs_at_the_size_overrides_it_is_given(tmp_path):
    from egg_mcp.workflow.service import profile

    async def main():
        svc = _service(tmp_path, gpu=False)
        started = await svc.start_task("softmax", k_seeds=1)
        tid = started.task_id
        cid = (await svc.verify(tid, SEED_A)).candidate_id
        with pytest.raises(WorkflowError):  # the fake worker has no profiling target: only the payload matters
            await profile(svc, tid, cid, size_overrides={"dim": 37})
        assert isinstance(svc.evaluator, FakeEvaluator)
        target, payload = svc.evaluator.jobs[-1]
        assert target == "egg_mcp.profiling.target:run_forward"
        assert payload["size_overrides"] == {**started.options.size_overrides, "dim": 37}
        with pytest.raises(WorkflowError, match="not module-level int constants"):
            await profile(svc, tid, cid, size_overrides={"cols": 3})

    asyncio.run(main())


def test_a_quick_check_is_a_column_and_the_note_stays_the_users(tmp_path):
    """The sizes of a quick check live in candidates.quick_sizes (task_status lists them), not in a prefix of the
    user's note; a full-size verify of the same source with the same note is its own row."""
    async def main():
        svc = _service(tmp_path, gpu=True)
        tid = (await svc.start_task("softmax", k_seeds=2)).task_id
        quick = await svc.verify(tid, SEED_A, note="try A", size_overrides={"dim": 37})
        full = await svc.verify(tid, SEED_A, note="try A")
        rows = {r["id"]: r for r in svc.ws.query("SELECT id, note, quick_sizes FROM candidates")}
        assert rows[quick.candidate_id]["note"] == "try A" and rows[quick.candidate_id]["quick_sizes"] == '{"dim": 37}'
        assert rows[full.candidate_id]["note"] == "try A" and rows[full.candidate_id]["quick_sizes"] is None
        listed = {c.candidate_id: c for c in svc.status(tid).candidates_in_stage}
        assert listed[quick.candidate_id].quick_sizes == {"dim": 37} and listed[full.candidate_id].quick_sizes is None
        assert "1 of 2 seeds verified correct" in full.next_step  # the quick check is not counted

    asyncio.run(main())
