"""The typed repository: every SQL statement of the workflow, over rows as frozen dataclasses.

Why one class: the workflow service (egg_mcp/workflow/service.py) is pure logic over these rows, so
it can be tested on a tmp workspace without knowing the schema, and every state change here is one
`BEGIN IMMEDIATE` transaction (serialised across server processes sharing a workspace) followed by a
snapshot of the database (the restore point if the file is ever damaged).
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass, fields
from typing import Any, TypeVar, overload

from egg_mcp.workspace.store import Workspace, new_id, now, owner_tag

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskRow:
    id: str
    name: str
    created_at: float
    updated_at: float
    stage: str
    reference_sha: str
    origin: str
    options_json: str
    analysis_json: str | None
    analysis_error: str | None
    baselines_json: str | None


@dataclass(frozen=True)
class CandidateRow:
    id: str
    task_id: str
    stage: str
    source_sha: str
    note: str | None
    created_at: float
    status: str  # queued | running | done | interrupted
    owner: str | None
    verdict: str | None
    time_ms: float | None
    result_sha: str | None
    cause: str | None = None  # why it is interrupted: one plain sentence
    quick_sizes: str | None = None  # a quick check's size_overrides (JSON); None at the task's sizes


@dataclass(frozen=True)
class CommitRow:
    task_id: str
    stage: str
    candidate_id: str
    committed_at: float
    time_ms: float | None
    decision_json: str
    forced: int
    force_reason: str | None
    guard: str | None
    warnings_json: str | None


@dataclass(frozen=True)
class ReportRow:
    id: str
    task_id: str
    candidate_id: str | None
    kind: str
    stage: str
    created_at: float
    report_sha: str


R = TypeVar("R")


@overload
def _row(cls: type[R], row: sqlite3.Row) -> R: ...
@overload
def _row(cls: type[R], row: sqlite3.Row | None) -> R | None: ...
def _row(cls: type[R], row: sqlite3.Row | None) -> R | None:
    if row is None:
        return None
    keys = row.keys()
    return cls(**{f.name: (row[f.name] if f.name in keys else None) for f in fields(cls)})  # type: ignore[arg-type]


class CommitConflict(Exception):
    """The task is no longer in the stage this commit was for (another commit won the race)."""

    def __init__(self, stage_now: str, existing: CommitRow | None):
        super().__init__(stage_now)
        self.stage_now = stage_now
        self.existing = existing




@dataclass(frozen=True)
class Claim:
    """Outcome of claiming a verify: a finished candidate with this source, one another server is
    evaluating right now, or a new row this call must evaluate."""

    kind: str  # "done" | "running" | "new"
    candidate: CandidateRow


class Repository:
    def __init__(self, ws: Workspace):
        self.ws = ws

    # -- plumbing -------------------------------------------------------------------------------
    def _one(self, cls: type[R], sql: str, args: tuple[Any, ...] = ()) -> R | None:
        rows = self.ws.query(sql, args)
        return _row(cls, rows[0]) if rows else None

    def _all(self, cls: type[R], sql: str, args: tuple[Any, ...] = ()) -> list[R]:
        return [_row(cls, r) for r in self.ws.query(sql, args)]  # type: ignore[misc]

    def _changed(self) -> None:
        try:
            self.ws.snapshot()
        except (OSError, sqlite3.Error):  # a failed snapshot must not fail the state change it follows
            log.warning("workspace snapshot failed", exc_info=True)

    # -- tasks ----------------------------------------------------------------------------------
    def task(self, task_id: str) -> TaskRow | None:
        return self._one(TaskRow, "SELECT * FROM tasks WHERE id=?", (task_id,))

    def recent_task_ids(self, n: int = 5) -> list[str]:
        return [r["id"] for r in self.ws.query("SELECT id FROM tasks ORDER BY created_at DESC LIMIT ?", (n,))]

    def insert_task(self, *, name: str, stage: str, reference_sha: str, origin: str, options_json: str,
                    analysis_json: str | None, analysis_error: str | None) -> TaskRow:
        task_id = new_id("t")
        t = now()
        with self.ws.transaction() as db:
            db.execute(
                "INSERT INTO tasks (id, name, created_at, updated_at, stage, reference_sha, origin, options_json,"
                " analysis_json, analysis_error) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (task_id, name, t, t, stage, reference_sha, origin, options_json, analysis_json, analysis_error))
        self._changed()
        return self.task(task_id)  # type: ignore[return-value]

    def set_baselines(self, task_id: str, baselines_json: str) -> None:
        with self.ws.transaction() as db:
            db.execute("UPDATE tasks SET baselines_json=?, updated_at=? WHERE id=?", (baselines_json, now(), task_id))
        self._changed()

    def list_tasks(self) -> list[tuple[TaskRow, float | None]]:
        rows = self.ws.query(
            "SELECT t.*, (SELECT MIN(time_ms) FROM commits c WHERE c.task_id=t.id) AS best"
            " FROM tasks t ORDER BY t.created_at DESC")
        return [(_row(TaskRow, r), r["best"]) for r in rows]  # type: ignore[misc]

    # -- candidates -----------------------------------------------------------------------------
    def candidate(self, task_id: str, candidate_id: str) -> CandidateRow | None:
        return self._one(CandidateRow, "SELECT * FROM candidates WHERE id=? AND task_id=?", (candidate_id, task_id))

    def recent_candidate_ids(self, task_id: str, n: int = 5) -> list[str]:
        return [r["id"] for r in self.ws.query(
            "SELECT id FROM candidates WHERE task_id=? ORDER BY created_at DESC LIMIT ?", (task_id, n))]

    def done_by_source(self, task_id: str, source_sha: str) -> CandidateRow | None:
        return self._one(CandidateRow, "SELECT * FROM candidates WHERE task_id=? AND source_sha=? AND status='done'"
                         " ORDER BY created_at DESC LIMIT 1", (task_id, source_sha))

    def claim_candidate(self, task_id: str, stage: str, source_sha: str, note: str | None,
                        owner_alive, same=lambda cand: True, quick_sizes: str | None = None) -> Claim:
        """One transaction: a done row with this source wins; else a running row whose owner is alive
        (another server evaluating it: the DB row is the lock); else a new running row for this call.
        `same(row)` narrows the match (verify: evaluated at the same sizes)."""
        with self.ws.transaction() as db:
            rows: list[sqlite3.Row] = db.execute(
                "SELECT * FROM candidates WHERE task_id=? AND source_sha=? AND status IN ('done','running','queued')"
                " ORDER BY (status='done') DESC, created_at DESC", (task_id, source_sha)).fetchall()
            for r in rows:
                cand = _row(CandidateRow, r)
                if not same(cand):
                    continue
                if cand.status == "done":
                    return Claim("done", cand)
                if owner_alive(cand.owner):
                    return Claim("running", cand)
            cand_id = new_id("c")
            db.execute(
                "INSERT INTO candidates (id, task_id, stage, source_sha, note, created_at, status, owner, quick_sizes)"
                " VALUES (?,?,?,?,?,?,?,?,?)",
                (cand_id, task_id, stage, source_sha, note, now(), "running", owner_tag(), quick_sizes))
            row = db.execute("SELECT * FROM candidates WHERE id=?", (cand_id,)).fetchone()
        return Claim("new", _row(CandidateRow, row))  # type: ignore[arg-type]

    def finish_candidate(self, candidate_id: str, verdict: str, time_ms: float | None, result_sha: str,
                         status: str = "done") -> None:
        """status 'harness_fault': the result is kept for the record, but claim_candidate never serves it."""
        with self.ws.transaction() as db:
            db.execute("UPDATE candidates SET status=?, verdict=?, time_ms=?, result_sha=? WHERE id=?",
                       (status, verdict, time_ms, result_sha, candidate_id))
        self._changed()

    def interrupt_candidate(self, candidate_id: str, cause: str | None = None) -> bool:
        """Mark a job interrupted with its cause. On a full disk the update may not fit in the WAL: one
        checkpoint (RESTART: the next write reuses the log from its start instead of growing it) and a
        retry; if that fails too the cause stays in `ws.faults` so waiters in this process still read it.
        Returns whether the row was written. Never raises an OSError/sqlite3.Error of its own."""
        self.ws.faults[candidate_id] = cause or "the job was interrupted"
        for attempt in range(2):
            try:
                with self.ws.transaction() as db:
                    db.execute("UPDATE candidates SET status='interrupted', verdict='interrupted', cause=? WHERE id=?",
                               (cause, candidate_id))
                break
            except (OSError, sqlite3.Error):
                if attempt:
                    log.warning("could not mark candidate %s interrupted (%s)", candidate_id, cause, exc_info=True)
                    return False
                try:
                    self.ws.query("PRAGMA wal_checkpoint(RESTART)")
                except (OSError, sqlite3.Error):
                    pass
        self._changed()
        return True

    def candidate_by_id(self, candidate_id: str) -> CandidateRow | None:
        return self._one(CandidateRow, "SELECT * FROM candidates WHERE id=?", (candidate_id,))

    def best_time_in_stage(self, task_id: str, stage: str) -> float | None:
        return self.ws.query("SELECT MIN(time_ms) AS t FROM candidates WHERE task_id=? AND stage=? AND "
                             "verdict='correct'", (task_id, stage))[0]["t"]

    def count_correct(self, task_id: str, stage: str) -> int:
        """Correct full-size candidates of a stage (a quick check at other sizes has quick_sizes)."""
        return self.ws.query("SELECT COUNT(*) AS n FROM candidates WHERE task_id=? AND stage=? AND verdict='correct'"
                             " AND quick_sizes IS NULL", (task_id, stage))[0]["n"]

    def fastest_correct(self, task_id: str, stage: str) -> CandidateRow | None:
        return self._one(CandidateRow, "SELECT * FROM candidates WHERE task_id=? AND stage=? AND verdict='correct'"
                         " AND time_ms IS NOT NULL ORDER BY time_ms LIMIT 1", (task_id, stage))

    def candidates_in_stage(self, task_id: str, stage: str) -> list[CandidateRow]:
        return self._all(CandidateRow, "SELECT * FROM candidates WHERE task_id=? AND stage=? ORDER BY created_at",
                         (task_id, stage))

    def running_count(self, task_id: str) -> int:
        return self.ws.query("SELECT COUNT(*) AS n FROM candidates WHERE task_id=? AND status IN ('queued','running')",
                             (task_id,))[0]["n"]

    # -- commits --------------------------------------------------------------------------------
    def commits(self, task_id: str) -> list[CommitRow]:
        return self._all(CommitRow, "SELECT * FROM commits WHERE task_id=? ORDER BY committed_at", (task_id,))

    def commit_for(self, task_id: str, stage: str) -> CommitRow | None:
        return self._one(CommitRow, "SELECT * FROM commits WHERE task_id=? AND stage=?", (task_id, stage))

    def commit(self, *, task_id: str, stage: str, new_stage: str, candidate_id: str, time_ms: float | None,
               decision_json: str, forced: bool, force_reason: str | None, guard: str,
               warnings_json: str) -> CommitRow:
        """Record the commit and advance the stage in one BEGIN IMMEDIATE transaction, only if the task
        is still in `stage` (checked inside the transaction: the loser of a race gets CommitConflict)."""
        with self.ws.transaction() as db:
            current = db.execute("SELECT stage FROM tasks WHERE id=?", (task_id,)).fetchone()["stage"]
            existing = _row(CommitRow, db.execute("SELECT * FROM commits WHERE task_id=? AND stage=?",
                                                  (task_id, stage)).fetchone())
            if current != stage or existing is not None:
                raise CommitConflict(current, existing)
            t = now()
            db.execute(
                "INSERT INTO commits (task_id, stage, candidate_id, committed_at, time_ms, decision_json, forced,"
                " force_reason, guard, warnings_json) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (task_id, stage, candidate_id, t, time_ms, decision_json, int(forced), force_reason, guard,
                 warnings_json))
            db.execute("UPDATE tasks SET stage=?, updated_at=? WHERE id=?", (new_stage, t, task_id))
        self._changed()
        return self.commit_for(task_id, stage)  # type: ignore[return-value]

    # -- reports --------------------------------------------------------------------------------
    def insert_report(self, *, task_id: str, candidate_id: str | None, kind: str, stage: str, report_sha: str) -> str:
        rid = new_id("r")
        with self.ws.transaction() as db:
            db.execute("INSERT INTO reports (id, task_id, candidate_id, kind, stage, created_at, report_sha)"
                       " VALUES (?,?,?,?,?,?,?)", (rid, task_id, candidate_id, kind, stage, now(), report_sha))
        self._changed()
        return rid

    def report(self, task_id: str, report_id: str) -> ReportRow | None:
        return self._one(ReportRow, "SELECT * FROM reports WHERE id=? AND task_id=?", (report_id, task_id))

    def reports(self, task_id: str) -> list[ReportRow]:
        return self._all(ReportRow, "SELECT * FROM reports WHERE task_id=? ORDER BY created_at", (task_id,))
