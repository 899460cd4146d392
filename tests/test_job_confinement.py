"""Every non-judge job (profiling target, tiling trials, compare, analysis) confines its worker to its
private dir before it runs, so code it executes can neither read nor write the workspace or user files."""

from __future__ import annotations

import asyncio

import pytest

from egg_mcp.evaluation.engine import WorkerEvaluator
from egg_mcp.sandbox import probe


@pytest.mark.skipif(probe().landlock_abi is None, reason="this kernel has no Landlock: jobs are not confined here")
def test_a_job_cannot_read_or_write_the_workspace(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    db = workspace / "egg.sqlite3"
    db.write_bytes(b"SQLite format 3\x00 stand-in")
    outside = tmp_path / "user_file.txt"

    async def main():
        ev = WorkerEvaluator(scratch_dir=workspace / "scratch", force_interpreter=True, spare_workers=0)
        try:
            return await ev.run_job("egg_mcp.evaluation.jobs:reach",
                                    {"read": [str(db)], "write": [str(db), str(outside)]},
                                    timeout_s=60, uses_gpu=False)
        finally:
            await ev.aclose()

    outcome = asyncio.run(main())
    assert outcome.ok, outcome.error
    assert outcome.result == {f"read {db}": "PermissionError", f"write {db}": "PermissionError",
                              f"write {outside}": "PermissionError"}
    assert db.read_bytes() == b"SQLite format 3\x00 stand-in"
    assert not outside.exists()
