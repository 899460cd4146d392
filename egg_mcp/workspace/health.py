"""Workspace health for `egg-mcp doctor`: can the database be opened, was it restored (now or at an
earlier start: recovery.log), is it at least as new as its newest verified snapshot, which artifacts are
damaged, which scratch folders of dead servers were removed, and the one recovery step when nothing
else works (`--start-empty`)."""

from __future__ import annotations

from pathlib import Path

from egg_mcp.workspace.damage import DatabaseDamaged
from egg_mcp.workspace.snapshots import RECOVERY_LOG, database_problem
from egg_mcp.workspace.store import Workspace


def workspace_health(root: Path, *, start_empty: bool = False, scratch: Path | None = None) -> list[tuple[str, str,
                                                                                                          str]]:
    """(status, what, detail) lines; status is 'ok', 'warn' or 'fail'."""
    lines: list[tuple[str, str, str]] = []
    root = Path(root).expanduser()
    db = root / "egg.sqlite3"
    if start_empty:
        problem = database_problem(db)
        if problem is None:
            lines.append(("ok", "workspace db", f"{db} is healthy: --start-empty changed nothing"))
        else:
            aside = _move_aside(root)
            lines.append(("warn", "workspace db", f"damaged ({problem}); moved to {aside}, starting empty"))
    try:
        ws = Workspace(root, scratch)
    except DatabaseDamaged as exc:
        return lines + [("fail", "workspace db", str(exc))]
    try:
        if ws.recovery_note:
            lines.append(("warn", "workspace db", ws.recovery_note))
        n_tasks = ws.query("SELECT COUNT(*) AS n FROM tasks")[0]["n"]
        snaps = sorted(ws.snapshots.glob("egg-*.sqlite3")) if ws.snapshots.is_dir() else []
        lines.append(("ok", "workspace db", f"{db}: {n_tasks} task(s), {len(snaps)} snapshot(s)"))
        lines.append(_snapshot_line(ws, snaps))
        earlier = _recovery_log(root)
        if earlier and not ws.recovery_note:
            lines.append(("warn", "workspace db", f"restored from a snapshot {len(earlier)} time(s) before; the last: "
                          f"{earlier[-1]} (the set-aside files are in {root / 'damaged'}; {root / RECOVERY_LOG} lists "
                          "all)"))
        pinned = sorted(ws.snapshots.glob("pinned-egg-*.sqlite3")) if ws.snapshots.is_dir() else []
        if pinned:
            lines.append(("warn", "snapshots", f"{len(pinned)} pinned snapshot(s) hold changes the database lost while "
                          f"open (it went back): {pinned[-1]}; compare and restore by hand if needed"))
        if ws.scratch_removed:
            lines.append(("warn", "scratch", f"removed {len(ws.scratch_removed)} worker or runner folder(s) left by "
                                             "stopped "
                          f"servers under {ws.scratch}"))
        bad = ws.damaged_artifacts()
        referenced = _referenced(ws)
        missing = [sha for sha in referenced if not (ws.artifacts / sha[:2] / sha).exists()]
        if bad or missing:
            detail = "; ".join([f"altered: {p}" for p in bad[:5]] + [f"missing: {s}" for s in missing[:5]])
            lines.append(("fail", "artifacts", f"{len(bad)} altered, {len(missing)} missing ({detail}); the "
                          "candidates they belong to must be verified again"))
        else:
            lines.append(("ok", "artifacts", f"{len(referenced)} referenced, all present and matching their hash"))
    finally:
        ws.close()
    return lines


def _snapshot_line(ws: Workspace, snaps) -> tuple[str, str, str]:
    """The database checked against its snapshots: its change counter against the newest verified one's."""
    if not snaps:
        return ("warn", "snapshots", "none yet: one is taken after the first change; until then a damaged database "
                "cannot be restored")
    best = ws._best_snapshot()
    if best is None:
        return ("fail", "snapshots", f"none of the {len(snaps)} snapshot(s) passes integrity_check: a damaged database "
                "could not be restored; make a change (a fresh snapshot is taken) or back up egg.sqlite3")
    snap, snap_changes = best
    changes = ws.changes()
    if snap_changes is None or changes is None:
        return ("ok", "snapshots", f"newest verified: {snap.name} (taken before change counters; the next change "
                "adds one)")
    if changes < snap_changes:  # cannot happen after an open, which restores; reported rather than assumed
        return ("fail", "snapshots", f"the database (change {changes}) is older than snapshot {snap.name} (change "
                f"{snap_changes}): restart the server to restore it")
    return ("ok", "snapshots", f"the database (change {changes}) is at least as new as the newest verified snapshot "
            f"{snap.name} (change {snap_changes}, integrity_check ok)")


def _recovery_log(root: Path) -> list[str]:
    try:
        return [ln for ln in (root / RECOVERY_LOG).read_text(encoding="utf-8").splitlines() if ln.strip()]
    except OSError:
        return []


def _referenced(ws: Workspace) -> set[str]:
    shas: set[str] = set()
    for sql in ("SELECT reference_sha AS s FROM tasks", "SELECT source_sha AS s FROM candidates",
                "SELECT result_sha AS s FROM candidates WHERE result_sha IS NOT NULL",
                "SELECT report_sha AS s FROM reports"):
        shas.update(r["s"] for r in ws.query(sql))
    return shas


def _move_aside(root: Path) -> Path | None:
    ws = Workspace.__new__(Workspace)  # no open: the file is damaged
    ws.root, ws.db_path = root, root / "egg.sqlite3"
    return ws._move_damaged()
