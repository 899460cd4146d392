"""SIGKILL during each state change (verify running, commit, export), then a restart: the workspace
is consistent (stages match commits, every referenced artifact intact, no running rows, no half
exports) and the server works on it."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from egg_mcp.stages import STAGE_ORDER
from egg_mcp.workspace.store import Workspace
from tests.conftest import REPO
from tests.workspace_fakes import make_service

pytestmark = pytest.mark.slow

CHILD = textwrap.dedent("""
    import asyncio, os, sys, time
    real_fsync = os.fsync
    def slow_fsync(fd):  # widens the window between a temp file and its rename (artifacts, exports)
        time.sleep(0.15)
        real_fsync(fd)
    os.fsync = slow_fsync
    from egg_mcp.problems.builtin import builtin_source
    from egg_mcp.workflow.models import StageDecision
    from egg_mcp.stages import STAGE_ORDER
    from egg_mcp.workspace.store import Workspace
    from tests.workspace_fakes import FakeEvaluator, make_service
    real_snapshot = Workspace.snapshot
    def slow_snapshot(self):  # a kill can land between a committed transaction and its snapshot
        time.sleep(0.1)
        return real_snapshot(self)
    Workspace.snapshot = slow_snapshot
    SEED = open(sys.argv[2]).read()

    async def main():
        svc = make_service(sys.argv[1], FakeEvaluator(delay_s=0.3))
        i = 0
        while True:
            task = await svc.start_task(builtin_source("softmax"), k_seeds=1)
            for stage in STAGE_ORDER[:-1]:
                print("verify", flush=True)
                v = await svc.verify(task.task_id, SEED + f"\\n# {os.getpid()} {i}\\n")
                i += 1
                print("commit", flush=True)
                await svc.commit_stage(task.task_id, v.candidate_id, StageDecision(summary=stage.value),
                                       stage=stage.value)
            print("export", flush=True)
            svc.export_kernel(task.task_id)

    asyncio.run(main())
""")


def _kill_at(ws: Path, marker: str, nth: int, delay_s: float) -> None:
    seed = REPO / "tests" / "fixtures" / "softmax" / "row_per_program.py"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(ws), str(seed)], cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        seen = 0
        deadline = time.monotonic() + 90
        while seen < nth:
            line = child.stdout.readline()
            assert line, f"child ended early: {child.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline
            seen += line.strip() == marker
        time.sleep(delay_s)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()


def _assert_consistent(ws_dir: Path) -> int:
    ws = Workspace(ws_dir)
    assert ws.recovery_note is None, ws.recovery_note
    assert ws.query("PRAGMA integrity_check")[0][0] == "ok"
    service = make_service(ws_dir)  # the restart: marks the dead server's jobs interrupted
    assert not ws.query("SELECT id FROM candidates WHERE status IN ('queued','running')")
    order = [s.value for s in STAGE_ORDER]
    tasks = service.repo.list_tasks()
    for task, _ in tasks:
        commits = service.repo.commits(task.id)
        stages = sorted((c.stage for c in commits), key=order.index)
        assert stages == order[: len(stages)], (task.id, stages)
        assert task.stage == order[len(stages)], (task.id, task.stage, stages)
        for c in commits:
            cand = service.repo.candidate(task.id, c.candidate_id)
            assert cand is not None and cand.verdict == "correct"
            assert "class ModelNew" in ws.get_text(cand.source_sha)
        for cand in service.repo.candidates_in_stage(task.id, task.stage):
            ws.get_text(cand.source_sha)
            if cand.result_sha:
                ws.get_text(cand.result_sha)
        assert service.status(task.id).stage == task.stage
    leftovers = [p for p in (ws_dir / "exports").iterdir() if p.name.startswith(".")]
    leftovers += [p for p in (ws_dir / "artifacts").glob("??/.*")]
    assert not leftovers, leftovers
    for export in (ws_dir / "exports").glob("*.py"):
        text = export.read_text()
        assert text.startswith("# egg-mcp export") and "class ModelNew" in text
    return len(tasks)


@pytest.mark.parametrize("marker", ["verify", "commit", "export"])
def test_sigkill_during_a_state_change_leaves_a_consistent_workspace(tmp_path, marker):
    ws = tmp_path / "ws"
    rng = random.Random(marker)
    for _ in range(3):
        nth = rng.randrange(1, 4) if marker != "export" else 1
        _kill_at(ws, marker, nth, rng.uniform(0.0, 0.3))
        assert _assert_consistent(ws) >= 1
