"""The workspace database's tables and how an older workspace is brought up to them (`PRAGMA user_version`)."""

from __future__ import annotations

import json
import sqlite3

SCHEMA_VERSION = 4
"""1: the original tables. 2: commits.warnings_json (the stored outcome an idempotent repeat returns).
3: candidates.cause (why a job was interrupted, one sentence) and meta.changes (the change counter)."""

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


LEGACY_QUICK_PREFIX = "[quick check at "
"""Before schema 4 a quick check's sizes were a prefix of the user's note: `[quick check at {json}] note`."""


def quick_notes_to_column(db: sqlite3.Connection) -> None:
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

