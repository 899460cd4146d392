"""Workspace health for `egg-mcp doctor`: can the database be opened, was it restored, which
artifacts are damaged, and the one recovery step when nothing else works (`--start-empty`)."""

from __future__ import annotations

from pathlib import Path

from egg_mcp.workspace.store import DatabaseDamaged, Workspace, database_problem


def workspace_health(root: Path, *, start_empty: bool = False) -> list[tuple[str, str, str]]:
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
        ws = Workspace(root)
    except DatabaseDamaged as exc:
        return lines + [("fail", "workspace db", str(exc))]
    try:
        if ws.recovery_note:
            lines.append(("warn", "workspace db", ws.recovery_note))
        n_tasks = ws.query("SELECT COUNT(*) AS n FROM tasks")[0]["n"]
        snaps = sorted(ws.snapshots.glob("egg-*.sqlite3")) if ws.snapshots.is_dir() else []
        lines.append(("ok", "workspace db", f"{db}: {n_tasks} task(s), {len(snaps)} snapshot(s)"))
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
