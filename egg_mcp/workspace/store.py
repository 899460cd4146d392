"""SQLite (WAL) records plus content-addressed artifact files.

Why this shape: sources and reports can be large and are immutable once written, so they live in
files named by their SHA-256 (written to a temporary name, fsynced, then renamed: a crash never
leaves half a file). Everything that changes — task stage, candidate status, commits — lives in
SQLite with WAL, so several server processes (Claude Desktop and an IDE on one workspace) can read
while one writes, and every state change is one transaction.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    stage TEXT NOT NULL,
    reference_sha TEXT NOT NULL,
    origin TEXT NOT NULL,
    options_json TEXT NOT NULL,
    analysis_json TEXT,
    analysis_error TEXT,
    baselines_json TEXT
);
CREATE TABLE IF NOT EXISTS candidates (
    id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL REFERENCES tasks(id),
    stage TEXT NOT NULL,
    source_sha TEXT NOT NULL,
    note TEXT,
    created_at REAL NOT NULL,
    status TEXT NOT NULL,              -- queued | running | done | interrupted
    owner TEXT,                        -- host:pid of the server process running the job
    verdict TEXT,
    time_ms REAL,
    result_sha TEXT
);
CREATE INDEX IF NOT EXISTS candidates_by_task ON candidates(task_id, stage);
CREATE INDEX IF NOT EXISTS candidates_by_source ON candidates(task_id, source_sha);
CREATE TABLE IF NOT EXISTS commits (
    task_id TEXT NOT NULL REFERENCES tasks(id),
    stage TEXT NOT NULL,
    candidate_id TEXT NOT NULL REFERENCES candidates(id),
    committed_at REAL NOT NULL,
    time_ms REAL,
    decision_json TEXT NOT NULL,
    forced INTEGER NOT NULL DEFAULT 0,
    force_reason TEXT,
    guard TEXT,
    PRIMARY KEY (task_id, stage)
);
CREATE TABLE IF NOT EXISTS reports (
    id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL REFERENCES tasks(id),
    candidate_id TEXT,
    kind TEXT NOT NULL,                -- profile | tiling
    stage TEXT NOT NULL,
    created_at REAL NOT NULL,
    report_sha TEXT NOT NULL
);
"""


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


class Workspace:
    """One directory: `egg.sqlite3` plus `artifacts/<aa>/<sha256>`."""

    def __init__(self, root: Path):
        self.root = Path(root).expanduser()
        self.artifacts = self.root / "artifacts"
        self.artifacts.mkdir(parents=True, exist_ok=True)
        (self.root / "exports").mkdir(exist_ok=True)
        (self.root / "scratch").mkdir(exist_ok=True)
        self.db_path = self.root / "egg.sqlite3"
        self._local = threading.local()
        self._conn().executescript(SCHEMA)  # idempotent; executescript manages its own transaction

    # -- SQLite -------------------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.db_path, timeout=30, isolation_level=None)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            self._local.conn = conn
        return conn

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def query(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        return self._conn().execute(sql, args).fetchall()

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- artifacts ----------------------------------------------------------------------------
    def put_text(self, text: str) -> str:
        """Store `text` under its SHA-256 (atomic: temp file, fsync, rename); return the hash."""
        sha = sha256_text(text)
        path = self._artifact_path(sha)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(3)}.tmp")
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        return sha

    def get_text(self, sha: str) -> str:
        return self._artifact_path(sha).read_text(encoding="utf-8")

    def put_json(self, obj: Any) -> str:
        return self.put_text(json.dumps(obj, sort_keys=True))

    def get_json(self, sha: str) -> Any:
        return json.loads(self.get_text(sha))

    def _artifact_path(self, sha: str) -> Path:
        if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
            raise ValueError(f"not an artifact hash: {sha!r}")
        return self.artifacts / sha[:2] / sha

    # -- recovery -----------------------------------------------------------------------------
    def mark_interrupted(self) -> int:
        """After a restart: jobs that were queued or running when their server process died are
        interrupted, not lost (the source stays; re-submitting it runs it again). Jobs owned by a
        live server process on this host (another client sharing the workspace) are left alone."""
        host = socket.gethostname()
        dead = []
        for row in self.query("SELECT id, owner FROM candidates WHERE status IN ('queued','running')"):
            owner_host, _, pid = (row["owner"] or ":").rpartition(":")
            if owner_host == host and pid.isdigit() and _pid_alive(int(pid)):
                continue
            dead.append(row["id"])
        with self.transaction() as db:
            for cid in dead:
                db.execute(
                    "UPDATE candidates SET status='interrupted', verdict='interrupted' WHERE id=?", (cid,)
                )
        return len(dead)


def owner_tag() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this process just started: anything it "owns" is from a previous life
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def now() -> float:
    return time.time()
