"""Damage and staleness of the workspace database, and the snapshots it is restored from.

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

import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING

from egg_mcp.workspace.damage import DatabaseDamaged

log = logging.getLogger(__name__)

SNAPSHOTS_KEPT = 3
SQLITE_HEADER = b"SQLite format 3\x00"
RECOVERY_LOG = "recovery.log"


class SnapshotRecovery:
    """The workspace's damage checks and snapshots, a part of store.Workspace (which sets these attributes and
    has `_conn()` and `close()`)."""

    root: Path
    db_path: Path
    artifacts: Path
    snapshots: Path
    recovery_note: str | None
    _snap_cache: dict[tuple[str, int, int], tuple[bool, int | None]]

    if TYPE_CHECKING:  # store.Workspace's
        def _conn(self) -> sqlite3.Connection: ...

        def close(self) -> None: ...

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
        if best is None:
            return None
        snap, snap_changes = best
        if snap_changes is None:
            return None
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
