"""Issue 28 item 5, "nothing lost": a lost or cut write-ahead log after a kill -9 never loses an
acknowledged task (the database older than its newest snapshot is set aside and the snapshot
restored, and the restart says so); rotation keeps the good snapshot; a full disk after a job ran
leaves the row `interrupted` with a plain cause that waiters on the same source read instead of
hanging; tool errors are sentences; scratch folders of killed servers are removed at start."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from egg_mcp.problems.builtin import builtin_source
from egg_mcp.workflow.service import WorkflowError
from egg_mcp.workspace.faults import StorageFault
from egg_mcp.workspace.health import workspace_health
from egg_mcp.workspace.store import Workspace
from tests.conftest import REPO
from tests.workspace_fakes import FakeEvaluator, make_service

SEED = (Path(__file__).parent / "fixtures" / "softmax" / "row_per_program.py").read_text()

WRITER = textwrap.dedent("""
    import asyncio, os, signal, sys
    from egg_mcp.problems.builtin import builtin_source
    from tests.workspace_fakes import make_service

    async def main():
        svc = make_service(sys.argv[1])
        for i in range(int(sys.argv[2])):
            task = await svc.start_task(builtin_source("softmax"), name=f"acked-{i}", k_seeds=1)
            print(task.task_id, flush=True)  # acknowledged: the call returned
        os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(main())
""")


def kill_after_acks(ws: Path, n: int) -> list[str]:
    """A process that acknowledges `n` tasks and then SIGKILLs itself; returns the acknowledged ids."""
    child = subprocess.run([sys.executable, "-c", WRITER, str(ws), str(n)], cwd=REPO, capture_output=True,
                           text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    ids = child.stdout.split()
    assert len(ids) == n
    return ids


def delete_wal(ws: Path) -> None:
    Path(str(ws / "egg.sqlite3") + "-wal").unlink()


def truncate_wal(ws: Path) -> None:
    wal = Path(str(ws / "egg.sqlite3") + "-wal")
    with open(wal, "r+b") as fh:
        fh.truncate(wal.stat().st_size * 2 // 3)


def tasks_seen_by_plain_sqlite(ws: Path, tmp: Path) -> int:
    """What a plain open of the damaged files would show (on a copy: the originals stay as they are)."""
    tmp.mkdir()
    for suffix in ("", "-wal", "-shm"):
        src = Path(str(ws / "egg.sqlite3") + suffix)
        if src.exists():
            shutil.copy(src, tmp / f"egg.sqlite3{suffix}")
    with sqlite3.connect(tmp / "egg.sqlite3") as conn:
        try:
            return conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0]
        except sqlite3.OperationalError:
            return 0


@pytest.mark.parametrize("damage", [delete_wal, truncate_wal])
def test_lost_or_cut_wal_after_kill9_loses_no_acknowledged_task(tmp_path, damage, caplog):
    ws = tmp_path / "ws"
    n = 4
    acked = kill_after_acks(ws, n)
    assert Path(str(ws / "egg.sqlite3") + "-wal").stat().st_size > 0, "the acknowledged tasks are in the WAL"
    damage(ws)
    assert tasks_seen_by_plain_sqlite(ws, tmp_path / "plain") < n, "the damage must lose tasks to a plain open"

    with caplog.at_level(logging.WARNING, logger="egg_mcp.workspace.snapshots"):
        service = make_service(ws)  # the restart
    note = service.ws.recovery_note
    assert note and "older than its newest snapshot" in note and "damaged" in note, note
    assert any("older than its newest snapshot" in r.getMessage() for r in caplog.records), "the restart says so"
    present = {t.id for t, _ in service.repo.list_tasks()}
    assert set(acked) <= present, f"lost: {set(acked) - present}"
    aside = list((ws / "damaged").glob("egg.sqlite3.*"))
    assert any(p.name.endswith("-wal") for p in aside) and any(not p.name.endswith(("-wal", "-shm")) for p in aside)
    assert "older than its newest snapshot" in (ws / "recovery.log").read_text()
    # the restored database works and a later restart is quiet
    asyncio.run(service.start_task(builtin_source("softmax"), k_seeds=1))
    service.ws.close()
    lines = workspace_health(ws)
    assert any(s == "warn" and "restored from a snapshot 1 time(s) before" in d for s, _, d in lines), lines
    assert any(w == "snapshots" and s == "ok" and "at least as new" in d for s, w, d in lines), lines
    again = Workspace(ws)
    assert again.recovery_note is None and len(again.query("SELECT id FROM tasks")) == n + 1


def test_doctor_reports_a_database_older_than_its_snapshot(tmp_path):
    ws = tmp_path / "ws"
    kill_after_acks(ws, 2)
    delete_wal(ws)
    lines = workspace_health(ws)  # doctor's open restores, and says so
    assert any(s == "warn" and "older than its newest snapshot" in d for s, _, d in lines), lines
    assert any(w == "snapshots" and s == "ok" for s, w, _ in lines), lines


def test_an_intact_restart_restores_nothing(tmp_path):
    ws = tmp_path / "ws"
    acked = kill_after_acks(ws, 3)
    reopened = Workspace(ws)
    assert reopened.recovery_note is None
    assert {r["id"] for r in reopened.query("SELECT id FROM tasks")} == set(acked)
    assert not (ws / "damaged").exists()


# -- rotation ---------------------------------------------------------------------------------------
def test_rotation_keeps_the_newest_snapshot_that_verifies(tmp_path):
    ws = tmp_path / "ws"
    service = make_service(ws)
    tid = asyncio.run(service.start_task(builtin_source("softmax"), k_seeds=1)).task_id
    good = sorted((ws / "snapshots").glob("egg-*.sqlite3"))[-1]
    for i in range(6):  # newer snapshots that are damaged (cut short on disk)
        bad = ws / "snapshots" / f"egg-{time.time_ns() + i:020d}-1.sqlite3"
        bad.write_bytes(good.read_bytes()[:3000])
    service.ws.rotate_snapshots()
    assert good.exists(), "the newest verified snapshot was rotated away"
    assert service.ws._latest_snapshot() == good
    service.ws.close()
    (ws / "egg.sqlite3").write_bytes(b"garbage" * 100)
    for extra in ("-wal", "-shm"):
        Path(str(ws / "egg.sqlite3") + extra).unlink(missing_ok=True)
    assert Workspace(ws).query("SELECT id FROM tasks")[0]["id"] == tid


def test_rotation_keeps_the_snapshot_with_the_most_changes_after_many_changes(tmp_path, monkeypatch):
    """The issue's sequence: a rolled-back database opened unnoticed (here: the start check switched off),
    then many changes; the snapshot holding every acknowledged task is pinned at the first change that
    goes backwards, survives the rotation, and doctor names it."""
    ws = tmp_path / "ws"
    acked = kill_after_acks(ws, 4)
    delete_wal(ws)
    monkeypatch.setattr(Workspace, "_older_than_snapshot", lambda self: None)  # the old, unnoticing open
    service = make_service(ws)
    assert not service.repo.list_tasks()
    for _ in range(10):
        asyncio.run(service.start_task(builtin_source("softmax"), k_seeds=1))
    service.ws.close()
    monkeypatch.undo()
    snaps = list((ws / "snapshots").glob("*.sqlite3"))
    kept = set()
    for snap in snaps:
        with sqlite3.connect(f"file:{snap}?immutable=1", uri=True) as conn:
            if set(acked) <= {r[0] for r in conn.execute("SELECT id FROM tasks")}:
                kept.add(snap.name)
    assert kept, "the snapshot with every acknowledged task was rotated away"
    assert all(name.startswith("pinned-") for name in kept)
    lines = workspace_health(ws)
    assert any(s == "warn" and "pinned" in d for s, _, d in lines), lines
    assert "went back from change" in (ws / "recovery.log").read_text()


# -- a full disk after the job ran ------------------------------------------------------------------
def _disk_full_on_results(ws: Workspace) -> None:
    real = ws.put_text

    def put_text(text: str) -> str:
        if '"verdict"' in text:  # the result of the job, written after it ran
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(ws.artifacts / "ab" / "x"))
        return real(text)

    ws.put_text = put_text  # type: ignore[method-assign]


async def _evaluating(fake: Any, n: int) -> None:  # a FakeEvaluator (the service types it as any Evaluator)
    """Until the fake evaluator has begun its n-th evaluation (a generous deadline, not a set sleep)."""
    deadline = asyncio.get_running_loop().time() + 60
    while fake.evaluated < n:
        assert asyncio.get_running_loop().time() < deadline, "the first verify never began its evaluation"
        await asyncio.sleep(0.01)


def test_disk_full_after_the_job_interrupts_the_row_and_waiters_read_the_cause(tmp_path):
    ws = tmp_path / "ws"
    first = make_service(ws, FakeEvaluator(delay_s=1.0))
    tid = asyncio.run(first.start_task(builtin_source("softmax"), k_seeds=1)).task_id
    asyncio.run(first.verify(tid, SEED + "\n# warm baselines\n"))
    _disk_full_on_results(first.ws)
    second = make_service(ws, FakeEvaluator(delay_s=1.0))  # another server on the workspace: the row is the lock

    async def both():
        a = asyncio.ensure_future(first.verify(tid, SEED))
        await _evaluating(first.evaluator, 2)  # the warm-up's evaluation, then a's: a's row is running
        b = asyncio.ensure_future(second.verify(tid, SEED))
        return await asyncio.wait_for(asyncio.gather(a, b, return_exceptions=True), timeout=20)

    ra, rb = asyncio.run(both())
    assert isinstance(ra, StorageFault) and str(ra).startswith(f"disk full: free space in {ws}"), ra
    assert isinstance(rb, WorkflowError) and "disk full: free space in" in str(rb), rb
    assert isinstance(second.evaluator, FakeEvaluator)
    assert second.evaluator.evaluated == 0, "the waiter gave up with the cause instead of evaluating again"
    rows = first.ws.query("SELECT status, verdict, cause FROM candidates WHERE status != 'done'")
    assert [(r["status"], r["verdict"]) for r in rows] == [("interrupted", "interrupted")]
    assert rows[0]["cause"].startswith("disk full: free space in ")
    # the disk has room again: a re-verify of the same source answers (it runs again)
    first.ws.put_text = Workspace.put_text.__get__(first.ws)  # type: ignore[method-assign]
    again = asyncio.run(asyncio.wait_for(second.verify(tid, SEED), timeout=20))
    assert again.verdict == "correct"


def test_disk_full_when_the_database_cannot_record_it_still_releases_waiters(tmp_path, monkeypatch):
    """The interruption itself cannot be written (every write fails): waiters in this process read the
    cause kept in memory."""
    ws = tmp_path / "ws"
    first = make_service(ws, FakeEvaluator(delay_s=1.0))
    tid = asyncio.run(first.start_task(builtin_source("softmax"), k_seeds=1)).task_id
    asyncio.run(first.verify(tid, SEED + "\n# warm\n"))
    _disk_full_on_results(first.ws)
    real_interrupt_tx = first.ws.transaction
    from contextlib import contextmanager

    @contextmanager
    def full(*a, **k):
        raise sqlite3.OperationalError("database or disk is full")
        yield  # pragma: no cover

    def interrupt(cid, cause=None):
        first.ws.transaction = full  # type: ignore[method-assign]
        try:
            return type(first.repo).interrupt_candidate(first.repo, cid, cause)
        finally:
            first.ws.transaction = real_interrupt_tx  # type: ignore[method-assign]

    monkeypatch.setattr(first.repo, "interrupt_candidate", interrupt)

    async def both():
        a = asyncio.ensure_future(first.verify(tid, SEED))
        await _evaluating(first.evaluator, 2)
        b = asyncio.ensure_future(first._verify_once(first._task_row(tid), first._stage(first._task_row(tid)),
                                                     SEED, first.ws.put_text(SEED), _Check(), None, None, None))
        return await asyncio.wait_for(asyncio.gather(a, b, return_exceptions=True), timeout=20)

    ra, rb = asyncio.run(both())
    assert "disk full" in str(ra) and "disk full" in str(rb), (ra, rb)


class _Check:
    ok = True


def test_tool_errors_are_sentences_on_a_full_disk_and_on_a_crash(tmp_path):
    import anyio
    from mcp import Client

    from egg_mcp.config import ServerConfig
    from egg_mcp.server import create_server
    from tests.mcp_driver import call, call_error

    class Crashing(FakeEvaluator):
        async def evaluate(self, *a, **k):
            raise RuntimeError("boom in the evaluator")

    ws = tmp_path / "ws"

    async def go():
        server = create_server(ServerConfig(workspace=ws, force_interpreter=True), evaluator=FakeEvaluator())
        async with Client(server) as client:
            tid = (await call(client, "start_task", reference="softmax", k_seeds=1))["task_id"]
            _disk_full_on_results(server.egg_service.ws)  # pyright: ignore[reportAttributeAccessIssue]  # create_server sets it
            text = await call_error(client, "verify", task_id=tid, source=SEED)
            assert f"disk full: free space in {ws}" in text, text
            server.egg_service.evaluator = Crashing()  # pyright: ignore[reportAttributeAccessIssue]
            text2 = await call_error(client, "verify", task_id=tid, source=SEED + "\n# other\n")
            assert "RuntimeError: boom in the evaluator" in text2, text2
            status = await call(client, "task_status", task_id=tid)
            return text, text2, status

    text, text2, status = anyio.run(go)
    for t in (text, text2):
        assert t.rstrip(": ").removeprefix("Error executing tool verify").strip(), f"bare error: {t!r}"
    rows = Workspace(ws).query("SELECT status, cause FROM candidates")
    assert rows and all(r["status"] == "interrupted" and r["cause"] for r in rows), [tuple(r) for r in rows]


# -- scratch of killed runs -------------------------------------------------------------------------
def test_scratch_folders_of_dead_servers_are_removed_at_start(tmp_path):
    ws = tmp_path / "ws"
    Workspace(ws).close()
    old = time.time() - 600
    dead = [ws / "scratch" / "worker-interp-dead1", ws / "scratch" / "lanes" / "gpu0" / "worker-gpu-dead2"]
    live = ws / "scratch" / "worker-interp-live"
    young = ws / "scratch" / "worker-interp-young"
    other = ws / "scratch" / "keepme"
    for d in [*dead, live, young, other]:
        (d / "tmp").mkdir(parents=True)
        (d / "tmp" / "f").write_text("x")
    for d in [*dead, live, other]:
        os.utime(d, (old, old))
    sleeper = subprocess.Popen(["sleep", "60"], cwd=live / "tmp")
    try:
        reopened = Workspace(ws)
        assert sorted(reopened.scratch_removed) == sorted(dead)
        assert not any(d.exists() for d in dead)
        assert live.exists() and young.exists() and other.exists()
        lines = workspace_health(ws)  # nothing left to remove now: no scratch line
        assert not any(w == "scratch" for _, w, _ in lines)
    finally:
        sleeper.kill()
        sleeper.wait()
