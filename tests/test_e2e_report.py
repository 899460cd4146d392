"""Task report: markdown and the stage-time chart, from task_status output."""

from __future__ import annotations

import subprocess
import sys

import pytest

from egg_mcp.contract import STRICT_FP32
from egg_mcp.e2e.task_report import render_task_report, stage_gains, stage_table, stage_time_chart, write_task_report
from egg_mcp.workflow.models import CommittedStage, Evidence, StageDecision, TaskOptions, TaskStatus
from tests.conftest import REPO


def _status(times: list[float | None], *, eager: float | None = 2.0, forced_last: bool = False) -> TaskStatus:
    stages = ["SEEDS", "ALGORITHM", "PARALLEL_MAPPING", "TILING", "MEMORY"][: len(times)]
    history = []
    for i, (stage, t) in enumerate(zip(stages, times)):
        history.append(CommittedStage(
            stage=stage, candidate_id=f"c-{i}", time_ms=t,
            speedup_vs_eager=None if t is None or eager is None else eager / t,
            decision=StageDecision(summary=f"{stage.lower()} change | piped", changes=[f"change {i}"],
                                   rationale=f"because {i}",
                                   evidence=[Evidence(metric="median_ms", before=times[i - 1] if i else None, after=t,
                                                      report_id="r-1" if i == 2 else None)]),
            forced=forced_last and i == len(times) - 1, force_reason="measured noise" if forced_last else None,
            guard="passed: test"))
    return TaskStatus(task_id="t-1", problem="softmax", origin="builtin:softmax", stage="DONE", next_step="export",
                      allowed_tools=["export_kernel"], options=TaskOptions(tolerance=STRICT_FP32, gpu_name="H200"),
                      eager_ms=eager, compile_ms=1.5 if eager else None, history=history, candidates_in_stage=[],
                      running_jobs=0, reports=[{"id": "r-1", "kind": "profile", "candidate_id": "c-1",
                                                "stage": "PARALLEL_MAPPING", "created_at": 0.0}])


def test_stage_gains():
    st = _status([1.0, 0.5, None, 0.25])
    assert stage_gains(st.history) == [None, 2.0, None, None]


def test_stage_table_rows_and_escaping():
    table = stage_table(_status([1.0, 0.8]))
    rows = table.splitlines()
    assert len(rows) == 4
    assert rows[2].startswith("| SEEDS | c-0 | 1 | — | 2.00x |")
    assert "| ALGORITHM | c-1 | 0.8 | 1.25x | 2.50x |" in rows[3]
    assert "change \\| piped" in rows[3]  # a | in a decision does not break the table


def test_report_has_decisions_evidence_and_kernel_path():
    md = render_task_report(_status([1.0, 0.8, 0.5], forced_last=True), kernel_path="/tmp/k.py", notes=["a note"])
    assert "# egg-mcp task report: softmax" in md
    assert "`/tmp/k.py`" in md
    assert "### PARALLEL_MAPPING:" in md and "(report r-1)" in md and "before 0.8 after 0.5" in md
    assert "**Forced past the guard**: measured noise" in md
    assert "## Notes" in md and "- a note" in md
    assert "profile `r-1`" in md


def test_report_without_timings_says_so():
    md = render_task_report(_status([None, None], eager=None))
    assert "Timings need a GPU" in md and "| SEEDS | c-0 | — |" in md


def test_chart_written_only_with_times(tmp_path):
    pytest.importorskip("matplotlib")
    png = stage_time_chart(_status([1.0, 0.8, 0.5]), tmp_path / "t.png")
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert stage_time_chart(_status([None, None], eager=None), tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()


def test_write_task_report_and_cli_from_status_json(tmp_path):
    st = _status([1.0, 0.9])
    files = write_task_report(st.model_dump(mode="json"), tmp_path / "a")
    assert files[0].name == "report.md"
    status_json = tmp_path / "status.json"
    status_json.write_text(st.model_dump_json())
    proc = subprocess.run([sys.executable, "-m", "egg_mcp.e2e.task_report", str(status_json), str(tmp_path / "b"),
                           "--kernel", "k.py"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "`k.py`" in (tmp_path / "b" / "report.md").read_text()
    status_json.write_text('{"not": "a status"}')
    bad = subprocess.run([sys.executable, "-m", "egg_mcp.e2e.task_report", str(status_json), str(tmp_path / "c")],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "not task_status output" in bad.stderr
