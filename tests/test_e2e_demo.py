"""`egg-mcp demo`: the shipped kernels, the honest commit rule, and the whole run on the CPU (slow)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import anyio
import pytest

from egg_mcp.e2e import demo, demo_plan
from egg_mcp.e2e.demo import DemoPlan, DemoReport, _Driver, carry_tunables, render_table, set_constant
from tests.conftest import REPO

SOFTMAX = demo_plan.KERNELS_DIR / "softmax"


# -- the shipped kernels ------------------------------------------------------------------------------


def test_every_planned_kernel_exists_and_defines_modelnew():
    for plan in demo.PLANS.values():
        files = [f for f, _ in plan.seeds] + [f for step in plan.steps for f in step.kernels]
        for f in files:
            src = demo.kernel_source(plan.problem, f)
            assert "class ModelNew" in src and "@triton.jit" in src, f
        assert len({f for f, _ in plan.seeds}) == len(plan.seeds) >= 2
        assert [s.stage for s in plan.steps] == ["ALGORITHM", "PARALLEL_MAPPING", "TILING", "MEMORY"]


CHECK = r"""
import importlib.util, os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch
bad = []
for path in sys.argv[1:]:
    spec = importlib.util.spec_from_file_location("k_" + os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for shape in [(8, 100), (3, 3000), (5, 1), (33, 64)]:
        torch.manual_seed(sum(shape))
        x = torch.randn(*shape) * 4
        y = mod.ModelNew()(x)
        if not torch.allclose(y, torch.softmax(x, dim=1), atol=1e-5, rtol=1e-5):
            bad.append((os.path.basename(path), shape, (y - torch.softmax(x, dim=1)).abs().max().item()))
print(bad)
sys.exit(1 if bad else 0)
"""


def test_softmax_kernels_correct_in_the_interpreter_at_odd_shapes():
    """Independent of the engine: each shipped kernel against torch.softmax, including rows shorter than a
    block, a single column, and several row tiles."""
    files = sorted(str(p) for p in SOFTMAX.glob("*.py"))
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", CHECK, *files], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]


def test_tiling_kernel_declares_its_space_and_matches_the_mapping_kernel():
    mapping = (SOFTMAX / "mapping_persistent_rows.py").read_text()
    tiling = (SOFTMAX / "tiling_tuning_space.py").read_text()
    assert "TUNING_SPACE = {" in tiling and "TUNING_SPACE" not in mapping

    def code(src: str) -> str:  # everything after the docstring, without the declared space
        return re.sub(r"\n# What propose_tiling.*?\n}\n", "", src[src.index("import torch"):], flags=re.DOTALL)

    assert code(tiling) == code(mapping)  # the tiling stage changes only what propose_tiling may vary


# -- helpers ------------------------------------------------------------------------------------------------


def test_carry_tunables_copies_committed_constants():
    committed = "NUM_WARPS = 16\nPROGRAMS_PER_SM = 2\nOTHER = 7\n"
    target = "NUM_WARPS = 8\nPROGRAMS_PER_SM = 2\nNUM_STAGES = 2\nx = NUM_WARPS\n"
    out, carried = carry_tunables(committed, target)
    assert carried == {"NUM_WARPS": 16}
    assert out.startswith("NUM_WARPS = 16\nPROGRAMS_PER_SM = 2\nNUM_STAGES = 2\n")
    assert carry_tunables("", target) == (target, {})


def test_set_constant():
    assert set_constant("A = 1\nNUM_STAGES = 2  # c\n", "NUM_STAGES", 3) == "A = 1\nNUM_STAGES = 3  # c\n"
    with pytest.raises(demo.DemoError):
        set_constant("A = 1\n", "NUM_STAGES", 3)


# -- the commit rule: never force, keep the previous kernel when there is no gain ---------------------------


class FakeClient:
    def __init__(self, refuse: frozenset[str] | set[str] = frozenset()):
        self.calls: list[tuple[str, dict]] = []
        self.refuse = refuse

    async def call_tool(self, tool, args):
        self.calls.append((tool, args))
        assert tool == "commit_stage" and "force" not in args
        if args["candidate_id"] in self.refuse:
            return SimpleNamespace(is_error=True, content=[SimpleNamespace(text="slower than the committed kernel")],
                                   structured_content=None)
        times = {"c-old": 1.0, "c-fast": 0.8, "c-slow": 1.2}
        committed = {"candidate_id": args["candidate_id"], "time_ms": times[args["candidate_id"]],
                     "speedup_vs_eager": None, "speedup_vs_compile": None, "guard": "passed"}
        return SimpleNamespace(is_error=False, structured_content={"committed": committed, "new_stage": "NEXT",
                                                                   "warnings": []})


def _driver(client, timing=True):
    d = _Driver(client, DemoPlan(problem="softmax", seeds=(), steps=()), log=lambda m: None)
    d.task_id, d.timing = "t-1", timing
    d.report = DemoReport(problem="softmax", task_id="t-1", transport="test", timing_available=timing)
    d.kernel_of = {"c-old": "old.py", "c-fast": "fast.py", "c-slow": "slow.py"}
    return d


OLD = {"candidate_id": "c-old", "time_ms": 1.0}


def _commit(d, candidate):
    return anyio.run(lambda: d.commit("TILING", candidate, OLD, "tried tiles", ["a"], "why", []))


def test_faster_candidate_is_committed_with_evidence():
    client = FakeClient()
    d = _driver(client)
    _commit(d, {"candidate_id": "c-fast", "time_ms": 0.8})
    (_, args), = client.calls
    assert args["candidate_id"] == "c-fast"
    assert args["decision"]["evidence"][-1] == {"metric": "median_ms", "before": 1.0, "after": 0.8}
    assert not d.report.stages[0].kept_previous


def test_slower_candidate_keeps_the_previous_kernel_with_no_gain():
    client = FakeClient()
    d = _driver(client)
    _commit(d, {"candidate_id": "c-slow", "time_ms": 1.2})
    (_, args), = client.calls
    assert args["candidate_id"] == "c-old" and args["decision"]["summary"].startswith("no gain")
    row = d.report.stages[0]
    assert row.kept_previous and row.kernel == "old.py" and row.time_ms == 1.0


def test_guard_refusal_falls_back_to_the_previous_kernel():
    client = FakeClient(refuse={"c-fast"})
    d = _driver(client)
    _commit(d, {"candidate_id": "c-fast", "time_ms": 0.8})
    assert [a["candidate_id"] for _, a in client.calls] == ["c-fast", "c-old"]
    assert "regression guard" in client.calls[1][1]["decision"]["summary"]


def test_without_timing_the_correct_candidate_is_committed():
    client = FakeClient()
    d = _driver(client, timing=False)
    _commit(d, {"candidate_id": "c-slow", "time_ms": None})
    assert client.calls[0][1]["candidate_id"] == "c-slow"
    assert "no timing" in client.calls[0][1]["decision"]["rationale"]


def test_unknown_problem_is_a_clear_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "egg_mcp", "demo", "--problem", "nope", "--workspace",
                           str(tmp_path / "ws")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "softmax" in proc.stderr


# -- end to end on the CPU interpreter ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_demo_end_to_end_on_the_cpu_interpreter(tmp_path):
    """`egg-mcp demo` as a user runs it: server over stdio, every stage to DONE, table printed."""
    out = tmp_path / "out" / "demo.json"
    proc = subprocess.run([sys.executable, "-m", "egg_mcp", "demo", "--workspace", str(tmp_path / "ws"),
                           "--interpreter", "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=390)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    report = DemoReport.model_validate_json(out.read_text())
    assert report.final_stage == "DONE"
    assert [s.stage for s in report.stages] == ["SEEDS", "ALGORITHM", "PARALLEL_MAPPING", "TILING", "MEMORY"]
    assert all(c.verdict == "correct" for c in report.candidates), [(c.kernel, c.summary) for c in report.candidates]
    assert len({c.kernel for c in report.candidates if c.stage == "SEEDS"}) == 3
    assert not any(s.kept_previous for s in report.stages)  # no timing: every stage's correct kernel goes on
    assert any(r["kind"] == "tiling" for r in report.reports) and any(r["kind"] == "profile" for r in report.reports)
    assert report.export_path and "class ModelNew" in open(report.export_path).read()
    assert "| MEMORY | memory_pipelined_hints.py |" in proc.stdout
    assert "Timings need a GPU" in proc.stdout
    assert (out.parent / "demo.md").is_file()
    status = json.loads(out.read_text())["status"]
    assert [h["stage"] for h in status["history"]] == [s.stage for s in report.stages]
    assert render_table(report) in proc.stdout
    assert f"workspace: {tmp_path / 'ws'}" in proc.stdout


@pytest.mark.gpu
@pytest.mark.timeout(400)
def test_demo_on_the_gpu_reports_real_times(tmp_path):
    out = tmp_path / "demo.json"
    proc = subprocess.run([sys.executable, "-m", "egg_mcp", "demo", "--workspace", str(tmp_path / "ws"), "--json",
                           str(out)], cwd=REPO, capture_output=True, text=True, timeout=390)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    report = DemoReport.model_validate_json(out.read_text())
    assert report.timing_available and report.eager_ms and report.final_stage == "DONE"
    assert all(s.time_ms and s.speedup_vs_eager for s in report.stages)
    times = [s.time_ms for s in report.stages[1:]]
    # the guard and the no-gain rule: no committed stage is slower than the one before it beyond noise
    assert all(b <= a * 1.05 for a, b in zip([report.stages[0].time_ms] + times, times))
    assert (tmp_path / "demo_stages.png").exists() or "matplotlib" in proc.stderr
