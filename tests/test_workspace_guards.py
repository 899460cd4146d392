"""Issue 13's table, row by row, on the service with a fake evaluator (no workers): what used to
lose or corrupt data now fails with a clear error before anything is stored."""

from __future__ import annotations

import asyncio
import math
import sqlite3
from pathlib import Path

import pytest

from egg_mcp.config import ServerConfig, derived_run_timeout
from egg_mcp.problems.builtin import builtin_source
from egg_mcp.workflow import limits
from egg_mcp.workflow.models import StageDecision
from egg_mcp.workflow.service import WorkflowError
from tests.workspace_fakes import FakeEvaluator, make_service

SEED = (Path(__file__).parent / "fixtures" / "softmax" / "row_per_program.py").read_text()
DECISION = StageDecision(summary="seed", changes=["x"], rationale="test")


def run(coro):
    return asyncio.run(coro)


async def _committed_task(service):
    task = await service.start_task(builtin_source("softmax"), k_seeds=1)
    v = await service.verify(task.task_id, SEED)
    await service.commit_stage(task.task_id, v.candidate_id, DECISION)
    return task.task_id, v.candidate_id


def _n_tasks(ws: Path) -> int:
    with sqlite3.connect(ws / "egg.sqlite3") as conn:
        return conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0]


# -- export_kernel writes only where it belongs ------------------------------------------------------
def test_export_over_the_database_or_artifacts_is_refused(tmp_path):
    ws = tmp_path / "ws"
    service = make_service(ws, allowed_roots=[tmp_path])  # an allowed root that contains the workspace
    tid, _ = run(_committed_task(service))
    db_before = (ws / "egg.sqlite3").read_bytes()
    artifact = next(p for p in (ws / "artifacts").glob("??/*"))
    art_before = artifact.read_bytes()
    for target in (ws / "egg.sqlite3", artifact, ws / "snapshots" / "x.py", ws / "new.py"):
        with pytest.raises(WorkflowError, match="inside the workspace"):
            service.export_kernel(tid, str(target))
    assert (ws / "egg.sqlite3").read_bytes() == db_before
    assert artifact.read_bytes() == art_before
    assert service.status(tid).stage == "ALGORITHM"
    outside = tmp_path / "elsewhere" / "k.py"
    assert service.export_kernel(tid, str(outside)).path == str(outside.resolve())
    assert outside.read_text().startswith("# egg-mcp export")


def test_export_to_a_folder_writes_a_file_inside_it_and_no_tmp_elsewhere(tmp_path):
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    service = make_service(tmp_path / "ws", allowed_roots=[allowed])
    tid, _ = run(_committed_task(service))
    result = service.export_kernel(tid, str(allowed))
    assert result.path is not None
    written = Path(result.path)
    assert written.parent == allowed.resolve() and written.name.startswith(tid)
    assert "class ModelNew" in written.read_text()
    assert [p.name for p in tmp_path.iterdir()] and not list(tmp_path.rglob("*tmp")), list(tmp_path.rglob("*tmp"))
    with pytest.raises(WorkflowError, match="may not write"):
        service.export_kernel(tid, str(tmp_path / "not-allowed.py"))
    rel = service.export_kernel(tid, "sub/k.py")  # relative: inside exports/
    assert rel.path is not None
    assert Path(rel.path) == (tmp_path / "ws" / "exports" / "sub" / "k.py").resolve()


# -- commits cannot skip stages ----------------------------------------------------------------------
def test_repeated_commit_of_a_seed_returns_the_stored_outcome(tmp_path):
    service = make_service(tmp_path / "ws")
    tid, cid = run(_committed_task(service))
    for _ in range(2):
        again = run(service.commit_stage(tid, cid, DECISION))
        assert again.repeated and again.new_stage == "ALGORITHM"
    assert service.status(tid).stage == "ALGORITHM"
    assert [h.stage for h in service.status(tid).history] == ["SEEDS"]


def test_commit_for_another_stage_is_refused_and_explicit_stage_carries_a_kernel(tmp_path):
    service = make_service(tmp_path / "ws")
    tid, cid = run(_committed_task(service))
    with pytest.raises(WorkflowError, match="task .* is in stage ALGORITHM"):
        run(service.commit_stage(tid, cid, DECISION, stage="TILING"))
    other = run(service.verify(tid, SEED + "\n# other\n"))
    with pytest.raises(WorkflowError, match="already committed with candidate"):
        run(service.commit_stage(tid, other.candidate_id, DECISION, stage="SEEDS"))
    kept = run(service.commit_stage(tid, cid, DECISION, stage="ALGORITHM"))  # keep the seed unchanged, on purpose
    assert kept.new_stage == "PARALLEL_MAPPING" and not kept.repeated
    assert service.status(tid).stage == "PARALLEL_MAPPING"


def test_concurrent_commits_in_one_server_advance_once(tmp_path):
    service = make_service(tmp_path / "ws")

    async def scenario():
        task = await service.start_task(builtin_source("softmax"), k_seeds=1)
        a = await service.verify(task.task_id, SEED)
        b = await service.verify(task.task_id, SEED + "\n# b\n")
        results = await asyncio.gather(*(service.commit_stage(task.task_id, c.candidate_id, DECISION)
                                         for c in (a, b, a, b)), return_exceptions=True)
        return task.task_id, results

    tid, results = run(scenario())
    assert service.status(tid).stage == "ALGORITHM"
    errors = [r for r in results if isinstance(r, Exception)]
    assert errors and all(isinstance(e, WorkflowError) and "already committed" in str(e) for e in errors)


def test_two_servers_on_one_workspace_commit_once(tmp_path):
    """Two services (separate connections, as two processes have) race in threads: BEGIN IMMEDIATE
    serialises them and the loser is told who won."""
    import threading

    ws = tmp_path / "ws"
    first = make_service(ws)

    async def setup():
        task = await first.start_task(builtin_source("softmax"), k_seeds=1)
        a = await first.verify(task.task_id, SEED)
        b = await first.verify(task.task_id, SEED + "\n# b\n")
        return task.task_id, a.candidate_id, b.candidate_id

    tid, ca, cb = run(setup())
    services = [make_service(ws) for _ in range(2)]
    barrier = threading.Barrier(2)
    out: list = [None, None]

    def worker(i, cid):
        barrier.wait()
        try:
            out[i] = asyncio.run(services[i].commit_stage(tid, cid, DECISION))
        except WorkflowError as exc:
            out[i] = exc

    threads = [threading.Thread(target=worker, args=(i, c)) for i, c in enumerate((ca, cb))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert first.status(tid).stage == "ALGORITHM" and len(first.status(tid).history) == 1
    assert sum(isinstance(o, WorkflowError) for o in out) == 1, out


# -- identical verifies share one evaluation ---------------------------------------------------------
def test_identical_concurrent_verifies_are_evaluated_once(tmp_path):
    fake = FakeEvaluator(delay_s=0.3)
    service = make_service(tmp_path / "ws", fake)

    async def scenario():
        task = await service.start_task(builtin_source("softmax"))
        return await asyncio.gather(*(service.verify(task.task_id, SEED) for _ in range(4)))

    results = run(scenario())
    assert fake.evaluated == 1
    assert len({r.candidate_id for r in results}) == 1 and sum(not r.cached for r in results) == 1


# -- validated inputs --------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs", [
    {"atol": math.nan}, {"atol": float("1e309")}, {"atol": -1.0}, {"rtol": 0.0},
    {"size_overrides": {"batch_size": 0}}, {"size_overrides": {"batch_size": -3}},
    {"size_overrides": {"batch_size": 10**12}}, {"name": "n" * 1_000_000},
])
def test_bad_start_task_arguments_are_refused_before_anything_is_stored(tmp_path, kwargs):
    ws = tmp_path / "ws"
    service = make_service(ws)
    with pytest.raises(WorkflowError) as info:
        run(service.start_task(builtin_source("softmax"), **kwargs))
    msg = str(info.value)
    assert "limit" in msg or "not allowed" in msg, msg
    assert _n_tasks(ws) == 0


def test_oversized_note_task_id_and_lone_surrogate_are_refused(tmp_path):
    ws = tmp_path / "ws"
    service = make_service(ws)
    tid, _ = run(_committed_task(service))
    with pytest.raises(WorkflowError, match="note is 5000000 characters; the limit is 4000"):
        run(service.verify(tid, SEED + "#n\n", note="x" * 5_000_000))
    with pytest.raises(WorkflowError, match="task_id is 1000000 characters"):
        service.status("t" * 1_000_000)
    with pytest.raises(WorkflowError, match="lone surrogate"):
        run(service.verify(tid, SEED + "#s\n", note="bad \ud800"))
    assert len(service.status(tid).candidates_in_stage) == 0


def test_size_memory_estimate_bounds_overrides():
    limits.check_size_memory(1 << 20, {"N": 1024}, {"N": 2048}, 16 << 30)  # 2 MiB: fine
    with pytest.raises(limits.InputError, match="limit is 16 GiB"):
        limits.check_size_memory(1 << 30, {"N": 1024}, {"N": 1024 * 64}, 16 << 30)


# -- corruption is detected ----------------------------------------------------------------------------
def test_deleted_or_altered_artifact_is_an_error_naming_it(tmp_path):
    ws = tmp_path / "ws"
    service = make_service(ws)
    tid, cid = run(_committed_task(service))
    sha = service.repo.candidate(tid, cid).source_sha
    path = ws / "artifacts" / sha[:2] / sha
    path.write_text("class ModelNew: pass  # tampered\n")
    with pytest.raises(WorkflowError, match=f"source of candidate {cid}.*altered"):
        service.candidate(tid, cid)
    path.unlink()
    for call in (lambda: service.context(tid), lambda: service.export_kernel(tid)):
        with pytest.raises(WorkflowError, match=f"source of candidate {cid}.*missing.*verify"):
            call()


# -- limits a user can set ---------------------------------------------------------------------------
def test_timeouts_come_from_env_and_flags_and_the_run_limit_from_eager_time(monkeypatch):
    from egg_mcp.cli import build_parser, config_from_args

    monkeypatch.setenv("EGG_MCP_RUN_TIMEOUT_S", "90")
    monkeypatch.setenv("EGG_MCP_COMPILE_TIMEOUT_S", "45")
    cfg = ServerConfig()
    assert (cfg.run_timeout_s, cfg.compile_timeout_s, cfg.analysis_timeout_s) == (90, 45, 120)
    args = build_parser().parse_args(["serve", "--run-timeout", "60", "--analysis-timeout", "20"])
    cfg = config_from_args(args)
    assert (cfg.run_timeout_s, cfg.analysis_timeout_s, cfg.compile_timeout_s) == (60, 20, 45)
    monkeypatch.setenv("EGG_MCP_RUN_TIMEOUT_S", "nan")
    with pytest.raises(ValueError, match="EGG_MCP_RUN_TIMEOUT_S"):
        ServerConfig()
    assert derived_run_timeout(None, 30, 300) == 300  # no eager time (no GPU): the ceiling
    assert derived_run_timeout(0.01, 30, 300) == 30  # a 10 us kernel: the floor
    assert derived_run_timeout(5.0, 30, 300) == 100  # 100 x 5 ms x 200 calls
    assert derived_run_timeout(50.0, 30, 300) == 300


def test_verify_uses_the_derived_run_limit_and_analysis_the_configured_one(tmp_path):
    fake = FakeEvaluator(time_ms=1.0, gpu=True)  # baselines: eager 4 ms
    service = make_service(tmp_path / "ws", fake, run_timeout_s=500, analysis_timeout_s=7)

    async def scenario():
        task = await service.start_task(builtin_source("softmax"))
        await service.verify(task.task_id, SEED)

    run(scenario())
    assert fake.options[-1].run_timeout_s == 80  # clamp(100 x 4 ms x 200, 30, 500)
    assert fake.jobs and fake.jobs[0][1] == 7


def test_analysis_runs_on_its_own_evaluator(tmp_path):
    from egg_mcp.config import ServerConfig as Cfg
    from egg_mcp.workflow.service import EggService
    from egg_mcp.workspace.store import Workspace

    main, side = FakeEvaluator(), FakeEvaluator()
    service = EggService(Cfg(workspace=tmp_path / "ws", force_interpreter=True), Workspace(tmp_path / "ws"), main,
                         None, analysis_evaluator=side)
    run(service.start_task(builtin_source("softmax")))
    assert side.jobs and not main.jobs


def test_identical_verify_on_a_second_server_waits_for_the_first_ones_row(tmp_path):
    """Across servers the candidate row is the lock: the second server does not evaluate again."""
    import threading

    ws = tmp_path / "ws"
    slow, other = FakeEvaluator(delay_s=1.0), FakeEvaluator()
    a = make_service(ws, slow)
    tid = run(a.start_task(builtin_source("softmax"))).task_id
    b = make_service(ws, other)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("a", asyncio.run(a.verify(tid, SEED))))
    t.start()
    import time

    deadline = time.monotonic() + 60
    while not slow.evaluated:  # a's row is running now (its evaluation began, for delay_s)
        assert time.monotonic() < deadline and t.is_alive(), "the first server never started its evaluation"
        time.sleep(0.01)
    out["b"] = run(b.verify(tid, SEED))
    t.join()
    assert slow.evaluated == 1 and other.evaluated == 0
    assert out["b"].candidate_id == out["a"].candidate_id and out["b"].cached
