"""SQLite (WAL) records plus content-addressed artifact files.

Why this shape: sources and reports can be large and are immutable once written, so they live in
files named by their SHA-256 (written to a temporary name, fsynced, then renamed: a crash never
leaves half a file). Everything that changes — task stage, candidate status, commits — lives in
SQLite with WAL, so several server processes (Claude Desktop and an IDE on one workspace) can read
while one writes, and every state change is one transaction.

Damage is detected, never papered over: an artifact whose bytes no longer hash to its name is an
error naming it; a database that is not a valid SQLite file (0 bytes, cut short, bad header) is
moved aside to `damaged/` and the latest good snapshot (SQLite's online backup, taken after every
state change into `snapshots/`) takes its place, or the server refuses to start with the command
that recovers (`egg-mcp doctor --workspace W --start-empty`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import socket
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
"""1: the original tables. 2: commits.warnings_json (the stored outcome an idempotent repeat returns)."""
SNAPSHOTS_KEPT = 3
SQLITE_HEADER = b"SQLite format 3\x00"

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
    warnings_json TEXT,
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


MIGRATIONS: dict[int, list[str]] = {
    2: ["ALTER TABLE commits ADD COLUMN warnings_json TEXT"],
}


class WorkspaceError(Exception):
    """Damage in the workspace the client cannot fix by changing its call; the message says what to do."""


class ArtifactError(WorkspaceError):
    """A stored source/result/report file is missing or no longer matches its hash."""


class DatabaseDamaged(WorkspaceError):
    """egg.sqlite3 is not a usable SQLite database and no good snapshot exists."""


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
        self.snapshots = self.root / "snapshots"
        self.recovery_note: str | None = None
        """Set when this open restored the database from a snapshot (doctor and the log say so)."""
        self._local = threading.local()
        self._check_database()
        self._migrate()
        self._remove_stale_tmp()

    def _remove_stale_tmp(self) -> None:
        """Temp files of a process that died mid-write (`.<name>.<pid>.<hex>.tmp|.egg-tmp`); a live
        writer's temp files are left alone."""
        for folder in [self.root / "exports", *self.artifacts.glob("??")]:
            for tmp in folder.glob(".*.*tmp"):
                parts = tmp.name.split(".")  # ['', name..., pid, hex, 'tmp' | 'egg-tmp']
                pid = int(parts[-3]) if len(parts) >= 4 and parts[-3].isdigit() else None
                if pid is not None and pid != os.getpid() and not _pid_alive(pid):
                    tmp.unlink(missing_ok=True)

    def _migrate(self) -> None:
        conn = self._conn()
        conn.executescript(SCHEMA)  # idempotent; executescript manages its own transaction
        with self.transaction() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            cols = {r[1] for r in db.execute("PRAGMA table_info(commits)")}
            for v in sorted(MIGRATIONS):
                if v > version:
                    for stmt in MIGRATIONS[v]:
                        if "warnings_json" in stmt and "warnings_json" in cols:
                            continue  # created by SCHEMA on a new workspace
                        db.execute(stmt)
            if version < SCHEMA_VERSION:
                db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    # -- damage and snapshots -------------------------------------------------------------------
    def _check_database(self) -> None:
        problem = database_problem(self.db_path)
        if problem is None:
            if not self.db_path.exists() and self._latest_snapshot() is not None:
                problem = "the database file is missing"
            else:
                return
        if problem == "0 bytes" and self._latest_snapshot() is None and not any(self.artifacts.iterdir()):
            self._move_damaged()  # an empty file in an empty workspace: nothing was ever stored
            return
        snap = self._latest_snapshot()
        if snap is None:
            raise DatabaseDamaged(
                f"the workspace database {self.db_path} is damaged ({problem}) and there is no snapshot to restore "
                f"from. Nothing was changed. Keep a copy of the file, then run `egg-mcp doctor --workspace "
                f"{self.root} --start-empty` to move it to {self.root / 'damaged'} and start with an empty database "
                "(stored sources under artifacts/ stay), or restore egg.sqlite3 from your own backup.")
        aside = self._move_damaged()
        restore_snapshot(snap, self.db_path)
        kept = f"it was moved to {aside}" if aside else "no file was left"
        self.recovery_note = (f"the database was damaged ({problem}); {kept} and it was restored from "
                              f"snapshot {snap.name} (changes after that snapshot are lost)")
        log.warning("workspace %s: %s", self.root, self.recovery_note)

    def _move_damaged(self) -> Path | None:
        if not self.db_path.exists():
            return None
        dest = self.root / "damaged"
        dest.mkdir(exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}"
        target = dest / f"egg.sqlite3.{stamp}"
        for suffix in ("", "-wal", "-shm"):  # the WAL belongs to the damaged file, never to a snapshot
            src = Path(str(self.db_path) + suffix)
            if src.exists():
                os.replace(src, Path(str(target) + suffix))
        return target

    def _latest_snapshot(self) -> Path | None:
        if not self.snapshots.is_dir():
            return None
        for snap in sorted(self.snapshots.glob("egg-*.sqlite3"), reverse=True):
            if database_problem(snap) is None:
                return snap
        return None

    def snapshot(self) -> Path:
        """A consistent copy of the database (SQLite online backup API), keeping the newest few."""
        self.snapshots.mkdir(exist_ok=True)
        name = f"egg-{time.time_ns():020d}-{os.getpid()}.sqlite3"
        tmp = self.snapshots / f".{name}.tmp"
        dst = sqlite3.connect(tmp)
        try:
            self._conn().backup(dst)
        finally:
            dst.close()
        os.replace(tmp, self.snapshots / name)
        for old in sorted(self.snapshots.glob("egg-*.sqlite3"), reverse=True)[SNAPSHOTS_KEPT:]:
            old.unlink(missing_ok=True)
        return self.snapshots / name

    def start_empty(self) -> Path | None:
        """Recovery without a snapshot: move the damaged database aside (kept) and start empty."""
        self.close()
        return self._move_damaged()

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

    def get_text(self, sha: str, what: str = "artifact") -> str:
        """The stored text, checked against its hash: a missing or altered file is an ArtifactError
        naming it (never a silently different source or result)."""
        path = self._artifact_path(sha)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ArtifactError(
                f"the stored {what} ({path}) is missing from the workspace; it cannot be recovered from here. "
                "Submit the source again (verify) or start a new task; `egg-mcp doctor --workspace "
                f"{self.root}` lists every damaged artifact.") from None
        if hashlib.sha256(data).hexdigest() != sha:
            raise ArtifactError(
                f"the stored {what} ({path}) was altered: its content no longer matches its SHA-256 name. "
                "It is not used. Submit the source again (verify) or start a new task; `egg-mcp doctor "
                f"--workspace {self.root}` lists every damaged artifact.")
        return data.decode("utf-8")

    def put_json(self, obj: Any) -> str:
        return self.put_text(json.dumps(obj, sort_keys=True))

    def get_json(self, sha: str, what: str = "report") -> Any:
        return json.loads(self.get_text(sha, what))

    def damaged_artifacts(self) -> list[str]:
        """Every artifact file whose content does not hash to its name (for doctor)."""
        bad = []
        for path in self.artifacts.glob("??/*"):
            if path.name.startswith("."):
                continue
            if hashlib.sha256(path.read_bytes()).hexdigest() != path.name:
                bad.append(str(path))
        return bad

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


def database_problem(path: Path) -> str | None:
    """Why `path` is not a usable SQLite database, or None (also None when it does not exist)."""
    path = Path(path)
    if not path.exists():
        return None
    size = path.stat().st_size
    if size == 0:
        return "0 bytes"
    with open(path, "rb") as fh:
        header = fh.read(100)
    if len(header) < 100 or not header.startswith(SQLITE_HEADER):
        return "not an SQLite header"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    n_pages = int.from_bytes(header[28:32], "big")
    wal = Path(str(path) + "-wal")
    if page_size and n_pages and size < page_size * n_pages and not (wal.exists() and wal.stat().st_size):
        return f"truncated: {size} bytes of {page_size * n_pages}"
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        try:
            rows = conn.execute("PRAGMA quick_check").fetchall()
        finally:
            conn.close()
    except sqlite3.OperationalError:
        return None  # cannot open read-only here (locks, permissions): not evidence of damage; the open will say
    except sqlite3.DatabaseError as exc:  # "file is not a database", "database disk image is malformed"
        return f"sqlite: {exc}"
    if rows != [("ok",)]:
        return "quick_check: " + "; ".join(str(r[0]) for r in rows[:3])
    return None


def restore_snapshot(snapshot: Path, target: Path) -> None:
    """Copy a snapshot into place through the backup API (atomic rename of a complete file)."""
    tmp = target.with_name(f".{target.name}.restore.tmp")
    src = sqlite3.connect(f"file:{snapshot}?mode=ro", uri=True)
    dst = sqlite3.connect(tmp)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    os.replace(tmp, target)


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
