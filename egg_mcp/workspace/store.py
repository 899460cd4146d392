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

A database can also be whole but *old*: after a kill -9 the write-ahead log (egg.sqlite3-wal) holds
the acknowledged transactions, and losing or truncating it silently rolls the database back. Every
transaction therefore bumps a change counter (`meta.changes`) that each snapshot carries too; at
start a database whose counter is below the newest verified snapshot's is set aside the same way
and that snapshot restored. Every restore is logged (stderr) and appended to `recovery.log`, which
`doctor` shows. Snapshots are integrity-checked when taken, and rotation never deletes the newest
verified one nor the one with the highest change counter.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import shutil
import socket
import sqlite3
import stat
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from egg_mcp.config import default_scratch_dir

log = logging.getLogger(__name__)

SCHEMA_VERSION = 4
"""1: the original tables. 2: commits.warnings_json (the stored outcome an idempotent repeat returns).
3: candidates.cause (why a job was interrupted, one sentence) and meta.changes (the change counter)."""
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
    result_sha TEXT,
    cause TEXT,                        -- why it is interrupted (one plain sentence), else NULL
    quick_sizes TEXT                   -- a quick check's size_overrides (JSON, sorted keys); NULL at the task's sizes
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
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta (key, value) VALUES ('changes', 0);
"""


MIGRATIONS: dict[int, list[tuple[str, str, str]]] = {
    2: [("commits", "warnings_json", "ALTER TABLE commits ADD COLUMN warnings_json TEXT")],
    3: [("candidates", "cause", "ALTER TABLE candidates ADD COLUMN cause TEXT")],
    4: [("candidates", "quick_sizes", "ALTER TABLE candidates ADD COLUMN quick_sizes TEXT")],
}
"""version -> (table, column, statement); a column SCHEMA already created on a new workspace is skipped."""
RECOVERY_LOG = "recovery.log"
SCRATCH_GRACE_S = 5.0
"""A scratch folder younger than this is never removed at start (a live server may be spawning into it)."""


LEGACY_QUICK_PREFIX = "[quick check at "
"""Before schema 4 a quick check's sizes were a prefix of the user's note: `[quick check at {json}] note`."""


def _quick_notes_to_column(db: sqlite3.Connection) -> None:
    """Schema 4: a quick check's sizes move from the note's prefix to `candidates.quick_sizes`; the note keeps
    only what the user wrote."""
    rows = db.execute("SELECT id, note FROM candidates WHERE note LIKE ?", (LEGACY_QUICK_PREFIX + "%",)).fetchall()
    for cand_id, note in rows:
        try:
            sizes, end = json.JSONDecoder().raw_decode(note, len(LEGACY_QUICK_PREFIX))
        except ValueError:
            continue  # a user's note that only looks like one: left as it is
        rest = note[end:].removeprefix("]").removeprefix(" ")
        db.execute("UPDATE candidates SET quick_sizes=?, note=? WHERE id=?",
                   (json.dumps(sizes, sort_keys=True), rest or None, cand_id))


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
        self._remove_stale_tmp()
        self._clean_scratch()

    def _remove_stale_tmp(self) -> None:
        """Temp files of a process that died mid-write (`.<name>.<pid>.<hex>.tmp|.egg-tmp`); a live
        writer's temp files are left alone."""
        for folder in [self.root / "exports", *self.artifacts.glob("??")]:
            for tmp in folder.glob(".*.*tmp"):
                parts = tmp.name.split(".")  # ['', name..., pid, hex, 'tmp' | 'egg-tmp']
                pid = int(parts[-3]) if len(parts) >= 4 and parts[-3].isdigit() else None
                if pid is not None and pid != os.getpid() and not _pid_alive(pid):
                    tmp.unlink(missing_ok=True)
        if self.snapshots.is_dir():  # `.egg-<ns>-<pid>.sqlite3.tmp`: a snapshot cut short by a kill or a full disk
            for tmp in self.snapshots.glob(".egg-*.sqlite3.tmp"):
                pid = tmp.name.split(".")[1].rpartition("-")[2]
                if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
                    tmp.unlink(missing_ok=True)

    def _clean_scratch(self) -> None:
        """Worker folders (`scratch/**/worker-*`) left by killed servers: removed at start when no live
        process works in them (its cwd is there) and they are older than SCRATCH_GRACE_S. Without /proc
        nothing can be told apart and nothing is removed."""
        if not Path("/proc/self/cwd").exists():
            return
        live = _live_cwds()
        self._remove_orphan_scratch(live)
        found: list[Path] = []
        # this workspace's scratch, and the folder older versions kept inside the workspace
        for scratch in dict.fromkeys([self.scratch, self.root / "scratch"]):
            if not scratch.is_dir():
                continue
            for dirpath, dirnames, _ in os.walk(scratch):
                for name in list(dirnames):
                    if name.startswith("worker-"):
                        found.append(Path(dirpath) / name)
                        dirnames.remove(name)  # never walk into a candidate's files
        if not found:
            return
        cutoff = time.time() - SCRATCH_GRACE_S
        for folder in found:
            try:
                if folder.stat().st_mtime > cutoff:
                    continue
            except OSError:
                continue
            if _in_use(folder, live):
                continue
            self._remove_runner_dirs(folder, live)
            shutil.rmtree(folder, ignore_errors=True)
            if not folder.exists():
                self.scratch_removed.append(folder)
        if self.scratch_removed:
            log.warning("workspace %s: removed %d scratch folder(s) left by stopped servers", self.root,
                        len(self.scratch_removed))

    def _remove_orphan_scratch(self, live: set[str]) -> None:
        """Sibling scratch folders (other workspaces', in `<temp>/egg-mcp-<uid>/`) whose workspace no longer
        exists: removed when older than SCRATCH_GRACE_S and no live process works in them."""
        base = self.scratch.parent
        if not base.name.startswith("egg-mcp-") or not base.is_dir():
            return
        cutoff = time.time() - SCRATCH_GRACE_S
        for folder in base.iterdir():
            if folder == self.scratch or folder.is_symlink() or not folder.is_dir():
                continue
            try:
                owner = Path((folder / SCRATCH_OWNER_FILE).read_text().strip())
                if not owner.is_absolute() or owner.exists() or folder.stat().st_mtime > cutoff:
                    continue
            except OSError:
                continue
            if _in_use(folder, live):
                continue
            for worker in folder.glob("**/worker-*"):  # their runners' dirs in the temp dir first
                self._remove_runner_dirs(worker, live)
            shutil.rmtree(folder, ignore_errors=True)
            if not folder.exists():
                self.scratch_removed.append(folder)

    def _remove_runner_dirs(self, folder: Path, live: set[str]) -> None:
        """The runners' private dirs a dead judge listed in its folder (runner_process.RUNNER_DIRS_FILE): each
        removed only when it is still a runner's dir of ours (a real dir owned by this user with the folders
        runner_env makes) and no live process works in it."""
        try:
            listed = (folder / RUNNER_DIRS_FILE).read_text().splitlines()
        except OSError:
            return
        for line in dict.fromkeys(listed):
            path = Path(line)
            if not path.is_absolute() or ".." in path.parts:
                continue
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or not all(
                    (path / sub).is_dir() for sub in ("home", "tmp", "triton_cache")):
                continue
            prefix = str(path) + os.sep
            if any(cwd == str(path) or cwd.startswith(prefix) for cwd in live):
                continue
            shutil.rmtree(path, ignore_errors=True)
            if not path.exists():
                self.scratch_removed.append(path)

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
                _quick_notes_to_column(db)
            if version < SCHEMA_VERSION:
                db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    # -- damage and snapshots -------------------------------------------------------------------
    def _check_database(self) -> None:
        problem = database_problem(self.db_path)
        stale = False
        if problem is None:
            if not self.db_path.exists() and self._latest_snapshot() is not None:
                problem = "the database file is missing"
            else:
                problem = self._older_than_snapshot()
                if problem is None:
                    return
                stale = True
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
        kept = (f"it was moved to {aside} (with its -wal and -shm files where they existed)" if aside
                else "no file was left")
        if stale:
            self.recovery_note = (f"the database was older than its newest snapshot ({problem}); {kept} and it was "
                                  f"restored from snapshot {snap.name}, which holds every acknowledged change")
        else:
            self.recovery_note = (f"the database was damaged ({problem}); {kept} and it was restored from "
                                  f"snapshot {snap.name} (changes after that snapshot are lost)")
        log.warning("workspace %s: %s", self.root, self.recovery_note)
        try:
            with open(self.root / RECOVERY_LOG, "a", encoding="utf-8") as fh:
                fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {self.recovery_note}\n")
        except OSError:
            log.warning("could not append to %s", self.root / RECOVERY_LOG, exc_info=True)

    def _older_than_snapshot(self) -> str | None:
        """Why the database is older than its newest verified snapshot (a lost or cut write-ahead log),
        or None. The snapshots are read first: one taken while we look can only be older than what we read."""
        best = self._best_snapshot()
        if best is None or best[1] is None:
            return None
        snap, snap_changes = best
        db_changes = database_changes(self.db_path)
        if db_changes is None or db_changes >= snap_changes:
            return None
        wal = Path(str(self.db_path) + "-wal")
        wal_state = (f"its write-ahead log is {wal.stat().st_size} bytes" if wal.exists() and wal.stat().st_size
                     else "its write-ahead log is missing or empty")
        shown = "no change counter" if db_changes < 0 else f"change {db_changes}"
        return f"{shown} in the database, change {snap_changes} in snapshot {snap.name}; {wal_state}"

    def _snapshot_info(self, snap: Path) -> tuple[bool, int | None]:
        """(passes integrity_check, its change counter), cached by name, size and mtime."""
        try:
            st = snap.stat()
        except OSError:
            return False, None
        key = (snap.name, st.st_size, st.st_mtime_ns)
        if key not in self._snap_cache:
            self._snap_cache[key] = snapshot_info(snap)
        return self._snap_cache[key]

    def _best_snapshot(self) -> tuple[Path, int | None] | None:
        """The verified snapshot with the highest change counter (newest name on a tie; snapshots from
        before the counter count as -1)."""
        if not self.snapshots.is_dir():
            return None
        best: tuple[int, str, Path, int | None] | None = None
        for snap in self.snapshots.glob("egg-*.sqlite3"):
            ok, changes = self._snapshot_info(snap)
            if ok and (best is None or (changes if changes is not None else -1, snap.name) > best[:2]):
                best = (changes if changes is not None else -1, snap.name, snap, changes)
        return None if best is None else (best[2], best[3])

    def _move_damaged(self) -> Path | None:
        if not self.db_path.exists():
            return None
        dest = self.root / "damaged"
        dest.mkdir(exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}"
        target, n = dest / f"egg.sqlite3.{stamp}", 1
        while any(Path(str(target) + sfx).exists() for sfx in ("", "-wal", "-shm")):  # never over an earlier one
            n += 1
            target = dest / f"egg.sqlite3.{stamp}.{n}"
        for suffix in ("", "-wal", "-shm"):  # the WAL belongs to the damaged file, never to a snapshot
            src = Path(str(self.db_path) + suffix)
            if src.exists():
                os.replace(src, Path(str(target) + suffix))
        return target

    def _latest_snapshot(self) -> Path | None:
        best = self._best_snapshot()
        return best[0] if best else None

    def snapshot(self) -> Path:
        """A consistent copy of the database (SQLite online backup API, then integrity_check: a copy that
        fails it never replaces anything), keeping the newest few (see rotate_snapshots)."""
        self.snapshots.mkdir(exist_ok=True)
        name = f"egg-{time.time_ns():020d}-{os.getpid()}.sqlite3"
        tmp = self.snapshots / f".{name}.tmp"
        try:
            dst = sqlite3.connect(tmp)
            try:
                self._conn().backup(dst)
                dst.execute("PRAGMA journal_mode=DELETE")  # a standalone file: no -wal beside a snapshot
                check = dst.execute("PRAGMA integrity_check").fetchall()
                row = dst.execute("SELECT value FROM meta WHERE key='changes'").fetchone()
            finally:
                dst.close()
            if check != [("ok",)]:
                raise sqlite3.DatabaseError(f"the new snapshot failed integrity_check: {check[:3]}")
            best = self._best_snapshot()
            os.replace(tmp, self.snapshots / name)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        changes = int(row[0]) if row else None
        if best is not None and best[1] is not None and changes is not None and changes < best[1]:
            self._pin(best[0], f"the database went back from change {best[1]} to change {changes} while open")
        self.rotate_snapshots()
        return self.snapshots / name

    def _pin(self, snap: Path, why: str) -> None:
        """Keep a snapshot out of rotation for good (`pinned-<name>`): it holds changes the live database lost."""
        target = snap.with_name("pinned-" + snap.name)
        os.replace(snap, target)
        note = f"{why}: snapshot {target} holds the later state and is kept; compare it with the database"
        log.warning("workspace %s: %s", self.root, note)
        try:
            with open(self.root / RECOVERY_LOG, "a", encoding="utf-8") as fh:
                fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {note}\n")
        except OSError:
            pass

    def rotate_snapshots(self) -> list[Path]:
        """Delete all but the SNAPSHOTS_KEPT newest snapshots, except that the newest one that passes
        integrity_check and the verified one with the highest change counter are always kept (a run of
        snapshots taken from a rolled-back or damaged database never pushes the good one out)."""
        snaps = sorted(self.snapshots.glob("egg-*.sqlite3"), reverse=True)
        keep = set(snaps[:SNAPSHOTS_KEPT])
        for snap in snaps:
            if self._snapshot_info(snap)[0]:
                keep.add(snap)
                break
        best = self._best_snapshot()
        if best is not None:
            keep.add(best[0])
        removed = [s for s in snaps if s not in keep]
        for old in removed:
            old.unlink(missing_ok=True)
        return removed

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
            if owner_host == host and pid.isdigit() and _pid_alive(int(pid)):
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


def snapshot_info(path: Path) -> tuple[bool, int | None]:
    """(passes integrity_check, change counter or None) of a snapshot file, read as it is (immutable:
    no -wal, no locks, nothing written beside it)."""
    try:
        conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
        try:
            ok = conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            try:
                row = conn.execute("SELECT value FROM meta WHERE key='changes'").fetchone()
            except sqlite3.OperationalError:
                row = None  # a snapshot from before the counter
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return False, None
    return ok, (int(row[0]) if row else None)


def database_changes(path: Path) -> int | None:
    """The change counter of the live database as SQLite would open it (its WAL applied), read through a
    read-only connection (which never checkpoints nor deletes the WAL); -1 when it has no counter (a
    database rolled back to before its tables existed), None when it cannot be read here."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        try:
            conn.execute("BEGIN")
            try:
                row = conn.execute("SELECT value FROM meta WHERE key='changes'").fetchone()
            except sqlite3.OperationalError as exc:
                if "no such table" not in str(exc):
                    return None
                row = None
            conn.execute("COMMIT")
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return int(row[0]) if row else -1


SCRATCH_OWNER_FILE = ".workspace"
"""In a per-workspace scratch folder in the temp dir: the workspace's path."""
RUNNER_DIRS_FILE = ".runner-dirs"
"""In a judge's folder: the runners' private dirs it made (outside the folder, in the temp dir), one a line."""


def private_scratch(path: Path, workspace: Path) -> Path:
    """`path` made (0700), when its parents in a shared temp dir are this user's own real dirs; else the
    workspace's own `scratch` folder (logged): never a folder another user could have planted."""
    try:
        base = path.parent
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        if base.name.startswith("egg-mcp-"):  # config.default_scratch_dir's per-user folder in the temp dir
            st = os.lstat(base)
            if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                raise OSError(f"{base} is not a directory of this user")
            if stat.S_IMODE(st.st_mode) & 0o077:
                os.chmod(base, 0o700)
        path.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise OSError(f"{path} is not a directory of this user")
        if base.name.startswith("egg-mcp-"):  # whose it is: a later start removes it once that workspace is gone
            owner = path / SCRATCH_OWNER_FILE
            if not owner.exists():
                owner.write_text(str(Path(workspace).expanduser().resolve()))
        return path
    except OSError as exc:
        fallback = workspace / "scratch"
        log.warning("scratch %s unusable (%s): workers' folders go to %s", path, exc, fallback)
        fallback.mkdir(parents=True, exist_ok=True)
        return fallback


def _live_cwds() -> set[str]:
    """The working directories of the processes this user can see (their /proc/<pid>/cwd)."""
    cwds = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cwds.add(os.readlink(entry / "cwd"))
            except OSError:
                continue
    return cwds


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


def _in_use(folder: Path, live: set[str]) -> bool:
    """Does a live process work in `folder` or below it (`live`: the working directories of live processes)?"""
    prefix = str(folder) + os.sep
    return any(cwd == str(folder) or cwd.startswith(prefix) for cwd in live)
