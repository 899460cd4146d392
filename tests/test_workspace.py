import os
import subprocess
import sys

import pytest

from egg_mcp.workspace.store import Workspace, new_id, owner_tag, sha256_text


def _add_task(ws: Workspace) -> str:
    tid = new_id("t")
    with ws.transaction() as db:
        db.execute(
            "INSERT INTO tasks (id,name,created_at,updated_at,stage,reference_sha,origin,options_json)"
            " VALUES (?,?,?,?,?,?,?,?)", (tid, "p", 0, 0, "SEEDS", ws.put_text("ref"), "inline", "{}"))
    return tid


def _add_candidate(ws: Workspace, tid: str, status: str, owner: str) -> str:
    cid = new_id("c")
    with ws.transaction() as db:
        db.execute("INSERT INTO candidates (id,task_id,stage,source_sha,created_at,status,owner) "
                   "VALUES (?,?,?,?,?,?,?)",
                   (cid, tid, "SEEDS", ws.put_text(cid), 0, status, owner))
    return cid


def test_artifacts_are_content_addressed_and_atomic(tmp_path):
    ws = Workspace(tmp_path / "ws")
    sha = ws.put_text("hello")
    assert sha == sha256_text("hello")
    assert ws.put_text("hello") == sha
    assert ws.get_text(sha) == "hello"
    assert not list(ws.artifacts.rglob("*.tmp"))
    with pytest.raises(ValueError):
        ws.get_text("../../etc/passwd")


def test_failed_transaction_rolls_back(tmp_path):
    ws = Workspace(tmp_path / "ws")
    tid = _add_task(ws)
    with pytest.raises(RuntimeError):
        with ws.transaction() as db:
            db.execute("UPDATE tasks SET stage='TILING' WHERE id=?", (tid,))
            raise RuntimeError("crash mid-write")
    assert ws.query("SELECT stage FROM tasks WHERE id=?", (tid,))[0]["stage"] == "SEEDS"


def test_restart_marks_jobs_of_dead_servers_interrupted_but_not_live_ones(tmp_path):
    ws = Workspace(tmp_path / "ws")
    tid = _add_task(ws)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        host = owner_tag().rpartition(":")[0]
        c_dead = _add_candidate(ws, tid, "running", f"{host}:{dead.pid}")
        c_live = _add_candidate(ws, tid, "running", f"{host}:{live.pid}")
        c_done = _add_candidate(ws, tid, "done", f"{host}:{dead.pid}")
        assert Workspace(tmp_path / "ws").mark_interrupted() == 1
        status = {r["id"]: (r["status"], r["verdict"]) for r in ws.query("SELECT * FROM candidates")}
        assert status[c_dead] == ("interrupted", "interrupted")
        assert status[c_live][0] == "running"
        assert status[c_done][0] == "done"
    finally:
        live.kill()


def test_workspace_survives_reopen(tmp_path):
    ws = Workspace(tmp_path / "ws")
    tid = _add_task(ws)
    ws.close()
    again = Workspace(tmp_path / "ws")
    assert again.query("SELECT id FROM tasks")[0]["id"] == tid
    assert os.path.exists(tmp_path / "ws" / "egg.sqlite3")
