"""SQLite (WAL) records plus content-addressed artifact files.

Why this shape: sources and reports can be large and are immutable once written, so they live in
files named by their SHA-256 (written to a temporary name, fsynced, then renamed: a crash never
leaves half a file). Everything that changes — task stage, candidate status, commits — lives in
SQLite with WAL, so several server processes (Claude Desktop and an IDE on one workspace) can read
while one writes, and every state change is one transaction.

Damage and snapshots: snapshots.py; scratch folders and leftovers of killed processes: scratch.py."""

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

from egg_mcp.config import default_scratch_dir
from egg_mcp.workspace.damage import ArtifactError
from egg_mcp.workspace.schema import (
    MIGRATIONS,
    SCHEMA,
    SCHEMA_VERSION,
    quick_notes_to_column,
)
from egg_mcp.workspace.scratch import (
    clean_scratch,
    pid_alive,
    private_scratch,
    remove_stale_tmp,
)
from egg_mcp.workspace.snapshots import SnapshotRecovery

log = logging.getLogger(__name__)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


class Workspace(SnapshotRecovery):
    """One directory: `egg.sqlite3` plus `artifacts/<aa>/<sha256>`."""

    last_opened: Path | None = None
    """The root of the workspace this process opened last (error texts that have no workspace at hand name it)."""

    def __init__(self, root: Path, scratch: Path | None = None):
        self.root = Path(root).expanduser()
        self.artifacts = self.root / "artifacts"
        self.artifacts.mkdir(parents=True, exist_ok=True)
        (self.root / "exports").mkdir(exist_ok=True)
        self.scratch = private_scratch(Path(scratch) if scratch is not None else default_scratch_dir(self.root),
                                       self.root)
        """Workers' folders (config.default_scratch_dir: outside the workspace unless that cannot be made safe)."""
        self.db_path = self.root / "egg.sqlite3"
        self.snapshots = self.root / "snapshots"
        Workspace.last_opened = self.root
        self.recovery_note: str | None = None
        """Set when this open restored the database from a snapshot (doctor and the log say so)."""
        self.scratch_removed: list[Path] = []
        """Scratch folders of dead processes removed by this open."""
        self.faults: dict[str, str] = {}
        """candidate id -> cause, for interruptions the database could not record (disk full): waiters here read it."""
        self._local = threading.local()
        self._snap_cache: dict[tuple[str, int, int], tuple[bool, int | None]] = {}
        self._check_database()
        self._migrate()
        remove_stale_tmp(self.root, self.artifacts, self.snapshots)
        clean_scratch(self.root, self.scratch, self.scratch_removed)

    def _migrate(self) -> None:
        conn = self._conn()
        conn.executescript(SCHEMA)  # idempotent; executescript manages its own transaction
        with self.transaction() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            for v in sorted(MIGRATIONS):
                if v > version:
                    for table, column, stmt in MIGRATIONS[v]:
                        if column in {r[1] for r in db.execute(f"PRAGMA table_info({table})")}:
                            continue  # created by SCHEMA on a new workspace
                        db.execute(stmt)
            if version < 4:
                quick_notes_to_column(db)
            if version < SCHEMA_VERSION:
                db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

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
        """BEGIN IMMEDIATE ... COMMIT; every transaction bumps the change counter (meta.changes)."""
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'changes'")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def changes(self) -> int | None:
        """The database's change counter (None before the meta table exists)."""
        try:
            return self.query("SELECT value FROM meta WHERE key = 'changes'")[0][0]
        except (sqlite3.OperationalError, IndexError):
            return None

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
            if owner_host == host and pid.isdigit() and pid_alive(int(pid)):
                continue
            dead.append(row["id"])
        if not dead:
            return 0
        with self.transaction() as db:
            for cid in dead:
                db.execute(
                    "UPDATE candidates SET status='interrupted', verdict='interrupted', cause=? WHERE id=?",
                    ("the server process running it stopped before it finished; verify the source again", cid))
        return len(dead)



def owner_tag() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"



def now() -> float:
    return time.time()

