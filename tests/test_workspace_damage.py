"""A damaged database is never opened as empty: it is kept aside and the latest snapshot restored,
or the server refuses with the recovery command; doctor reports it."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from egg_mcp.problems.builtin import builtin_source
from egg_mcp.workflow.models import StageDecision
from egg_mcp.workspace.damage import DatabaseDamaged
from egg_mcp.workspace.health import workspace_health
from egg_mcp.workspace.schema import SCHEMA_VERSION
from egg_mcp.workspace.store import Workspace
from tests.workspace_fakes import make_service

SEED = (Path(__file__).parent / "fixtures" / "softmax" / "row_per_program.py").read_text()


def _workspace_with_a_commit(ws: Path) -> str:
    service = make_service(ws)

    async def go():
        task = await service.start_task(builtin_source("softmax"), k_seeds=1)
        v = await service.verify(task.task_id, SEED)
        await service.commit_stage(task.task_id, v.candidate_id, StageDecision(summary="seed"))
        return task.task_id

    tid = asyncio.run(go())
    service.ws.close()
    return tid


def _zero(db: Path) -> None:
    db.write_bytes(b"")


def _half(db: Path) -> None:
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2])


def _header(db: Path) -> None:
    data = bytearray(db.read_bytes())
    data[:16] = b"not a database!!"
    db.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_zero, _half, _header])
def test_damaged_database_is_kept_and_restored_from_the_latest_snapshot(tmp_path, damage):
    ws = tmp_path / "ws"
    tid = _workspace_with_a_commit(ws)
    assert list((ws / "snapshots").glob("egg-*.sqlite3"))
    for extra in ("-wal", "-shm"):
        Path(str(ws / "egg.sqlite3") + extra).unlink(missing_ok=True)
    damage(ws / "egg.sqlite3")
    reopened = Workspace(ws)
    assert reopened.recovery_note and "restored from snapshot" in reopened.recovery_note
    rows = reopened.query("SELECT stage FROM tasks WHERE id=?", (tid,))
    assert rows and rows[0]["stage"] == "ALGORITHM"
    assert list((ws / "damaged").glob("egg.sqlite3.*")), "the damaged file is kept"


def test_damaged_database_without_snapshot_is_refused_with_the_recovery_command(tmp_path):
    ws = tmp_path / "ws"
    _workspace_with_a_commit(ws)
    for snap in (ws / "snapshots").iterdir():
        snap.unlink()
    _half(ws / "egg.sqlite3")
    damaged_bytes = (ws / "egg.sqlite3").read_bytes()
    with pytest.raises(DatabaseDamaged, match="--start-empty"):
        Workspace(ws)
    assert (ws / "egg.sqlite3").read_bytes() == damaged_bytes, "refusing changes nothing"
    health = workspace_health(ws)
    assert health[-1][0] == "fail" and "--start-empty" in health[-1][2]
    health = workspace_health(ws, start_empty=True)
    assert health[0][0] == "warn" and "moved to" in health[0][2]
    assert [f.read_bytes() for f in (ws / "damaged").glob("egg.sqlite3.*") if not f.name.endswith(("-wal", "-shm"))] \
        == [damaged_bytes]
    assert Workspace(ws).query("SELECT COUNT(*) AS n FROM tasks")[0]["n"] == 0


def test_empty_file_in_a_new_workspace_is_just_new(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "egg.sqlite3").write_bytes(b"")
    assert Workspace(ws).recovery_note is None


def test_doctor_lists_damaged_artifacts(tmp_path):
    ws = tmp_path / "ws"
    _workspace_with_a_commit(ws)
    victim = next((ws / "artifacts").glob("??/*"))
    victim.write_text("changed")
    lines = workspace_health(ws)
    assert any(status == "fail" and str(victim) in detail for status, _, detail in lines), lines


def test_old_workspace_is_migrated(tmp_path):
    """A v1 workspace (no commits.warnings_json, user_version 0) opens and gains the column."""
    ws = tmp_path / "ws"
    ws.mkdir()
    with sqlite3.connect(ws / "egg.sqlite3") as conn:
        conn.executescript("""
            CREATE TABLE tasks (id TEXT PRIMARY KEY, name TEXT NOT NULL, created_at REAL NOT NULL,
              updated_at REAL NOT NULL, stage TEXT NOT NULL, reference_sha TEXT NOT NULL, origin TEXT NOT NULL,
              options_json TEXT NOT NULL, analysis_json TEXT, analysis_error TEXT, baselines_json TEXT);
            CREATE TABLE commits (task_id TEXT NOT NULL, stage TEXT NOT NULL, candidate_id TEXT NOT NULL,
              committed_at REAL NOT NULL, time_ms REAL, decision_json TEXT NOT NULL, forced INTEGER NOT NULL DEFAULT 0,
              force_reason TEXT, guard TEXT, PRIMARY KEY (task_id, stage));
            INSERT INTO commits VALUES ('t-1', 'SEEDS', 'c-1', 0, 1.0, '{}', 0, NULL, 'passed');
        """)
    opened = Workspace(ws)
    assert opened.query("PRAGMA user_version")[0][0] == SCHEMA_VERSION
    assert opened.query("SELECT warnings_json FROM commits")[0]["warnings_json"] is None
    assert len(opened.query("SELECT * FROM commits")) == 1


def test_a_v3_workspace_moves_quick_check_sizes_from_the_note_to_their_column(tmp_path):
    """Before schema 4 a quick check's sizes were a prefix of the user's note; opening such a workspace moves them to
    candidates.quick_sizes and leaves the note as the user wrote it (a note that only looks like a prefix stays)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    with sqlite3.connect(ws / "egg.sqlite3") as conn:
        conn.executescript("""
            CREATE TABLE candidates (id TEXT PRIMARY KEY, task_id TEXT NOT NULL, stage TEXT NOT NULL,
              source_sha TEXT NOT NULL, note TEXT, created_at REAL NOT NULL, status TEXT NOT NULL, owner TEXT,
              verdict TEXT, time_ms REAL, result_sha TEXT, cause TEXT);
            INSERT INTO candidates VALUES ('c-1', 't-1', 'SEEDS', 's', '[quick check at {"dim": [8, 100]}] try A', 0,
              'done', NULL, 'correct', 1.0, 'r', NULL);
            INSERT INTO candidates VALUES ('c-2', 't-1', 'SEEDS', 's', '[quick check at {"batch_size": 4}] ', 0,
              'done', NULL, 'correct', 1.0, 'r', NULL);
            INSERT INTO candidates VALUES ('c-3', 't-1', 'SEEDS', 's', '[quick check at nothing', 0,
              'done', NULL, 'correct', 1.0, 'r', NULL);
            PRAGMA user_version=3;
        """)
    opened = Workspace(ws)
    rows = {r["id"]: (r["quick_sizes"],
                      r["note"]) for r in opened.query("SELECT id, quick_sizes, note FROM candidates")}
    assert rows == {"c-1": ('{"dim": [8, 100]}', "try A"), "c-2": ('{"batch_size": 4}', None),
                    "c-3": (None, "[quick check at nothing")}
    assert opened.query("PRAGMA user_version")[0][0] == SCHEMA_VERSION == 4
