"""Tool-wrapped jobs on the GPU, confined (issue 12): a real profile_ncu job and a real memcheck job run
with the wrapped process under Landlock (tool_confine.py) and still bring their report back, stating the
sandbox level. Run on the H200 (about 1-2 min):

    python3 -m pytest -q -m gpu tests/gpu/test_wrapped_gpu.py tests/gpu/test_memcheck_gpu.py -s
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from egg_mcp.contract import EvalOptions  # noqa: E402
from egg_mcp.evaluation.engine import WorkerEvaluator  # noqa: E402
from egg_mcp.problems.builtin import builtin_source  # noqa: E402
from egg_mcp.profiling import ncu_command, profile_job  # noqa: E402
from egg_mcp.sandbox import probe  # noqa: E402
from egg_mcp.stages import Stage  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

CORRECT = (Path(__file__).parent.parent / "adversarial" / "correct_row_softmax.py").read_text()
LANDLOCK = probe().landlock_abi is not None


def _with_evaluator(tmp_path, fn):
    async def main():
        ev = WorkerEvaluator(scratch_dir=tmp_path / "scratch", spare_workers=0)
        try:
            return await fn(ev)
        finally:
            await ev.aclose()

    return asyncio.run(main())


@pytest.mark.skipif(ncu_command.find_ncu() is None, reason="ncu not installed")
def test_profile_ncu_under_confinement_still_returns_counters_and_states_its_sandbox(tmp_path):
    report = _with_evaluator(tmp_path, lambda ev: profile_job.profile_candidate(
        ev, reference_source=builtin_source("softmax"), candidate_source=CORRECT, options=EvalOptions(),
        stage=Stage.MEMORY, gpu=None, timeout_s=240))
    print(f"\nprofile under ncu: source={report.source}, sandbox={report.sandbox}, wall {report.wall_s:.1f} s, "
          f"fallback={report.fallback_reason}")
    assert report.sandbox is not None and "wrapped by ncu" in report.sandbox, report.sandbox
    if LANDLOCK:
        assert report.sandbox.startswith("landlock"), report.sandbox
    assert report.source == "ncu", f"ncu's injection failed under the sandbox: {report.fallback_reason}"


@pytest.mark.skipif(ncu_command.find_ncu() is None, reason="ncu not installed")
def test_an_ncu_wrapped_job_cannot_read_or_write_the_workspace(tmp_path):
    ws = tmp_path / "workspace"
    ws.mkdir()
    (ws / "tasks.json").write_text("{}")
    ncu = ncu_command.find_ncu()
    assert ncu is not None  # (skipped without one)
    argv = ncu_command.ncu_argv(ncu, ["gpu__time_duration.sum"], "regex:.*", str(tmp_path / "ncu.csv"))
    outcome = _with_evaluator(tmp_path, lambda ev: ev.run_job(
        "tests.doubles.jobs:reach", {"read": [str(ws / "tasks.json")], "write": [str(ws / "x"), "ok.txt"],
                                          "env": ["EGG_MCP_TOKEN"]}, timeout_s=120, uses_gpu=True,
        wrapper_argv=argv))
    print(f"\nncu-wrapped job: {outcome.result}; sandbox {outcome.sandbox}")
    assert outcome.ok, (outcome.error, outcome.stderr_tail[-3000:])
    assert outcome.sandbox and outcome.sandbox.get("wrapped_by") == "ncu"
    if LANDLOCK:
        assert outcome.result[f"read {ws / 'tasks.json'}"] == "PermissionError"
        assert outcome.result[f"write {ws / 'x'}"] == "PermissionError"
    assert outcome.result["write ok.txt"] == "ok" and outcome.result["env EGG_MCP_TOKEN"] == "unset"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-m", "gpu", "-s"]))
