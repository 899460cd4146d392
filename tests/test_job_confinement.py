"""Every non-judge job (profiling target, tiling trials, compare, analysis) confines its worker to its
private dir before it runs, so code it executes can neither read nor write the workspace or user files."""

from __future__ import annotations

import asyncio
import os

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
            return await ev.run_job("tests.doubles.jobs:reach",
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


FAKE_TOOL = '''
"""Stands in for ncu / compute-sanitizer: records that it ran, then runs the wrapped command as its child."""
import os, subprocess, sys
args = sys.argv[1:]
if args and args[0] == "--":
    args = args[1:]
open(os.environ.get("TMPDIR", ".") + "/fake-tool-ran", "w").write(" ".join(args[:3]))
sys.exit(subprocess.call(args, close_fds=False))  # like ncu: the job and result pipes pass
'''


@pytest.mark.skipif(probe().landlock_abi is None, reason="this kernel has no Landlock: jobs are not confined here")
@pytest.mark.parametrize("ipc", ["default", "open"])
def test_a_tool_wrapped_job_is_confined_and_reports_its_level(tmp_path, monkeypatch, ipc):
    """ncu wraps the profiling worker: the worker still confines itself (tool_confine.py), its environment
    is the runners' allow-list (no token), and the job's outcome says which sandbox was in force."""
    monkeypatch.setenv("EGG_MCP_TOKEN", "egg-test-token-wrapped")
    if ipc == "open":  # the operator's escape hatch for a tool whose injection needs its ports and sockets
        monkeypatch.setenv("EGG_MCP_TOOL_IPC", "open")
    monkeypatch.setenv("EGG_MCP_WORKSPACE", str(tmp_path / "workspace"))
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    db = workspace / "egg.sqlite3"
    db.write_bytes(b"SQLite format 3\x00 stand-in")
    secret = tmp_path / "user_notes.txt"
    secret.write_text("the user's own file")
    outside = tmp_path / "written_by_job.txt"
    (tmp_path / "nsight" / "bin").mkdir(parents=True)
    tool = tmp_path / "nsight" / "bin" / "fake_ncu.py"
    import sys

    tool.write_text(f"#!{sys.executable}" + FAKE_TOOL)
    tool.chmod(0o755)

    async def main():
        ev = WorkerEvaluator(scratch_dir=workspace / "scratch", force_interpreter=True, spare_workers=0)
        try:
            return await ev.run_job("tests.doubles.jobs:reach",
                                    {"read": [str(db), str(secret)], "write": [str(db), str(outside), "ok.txt"],
                                     "env": ["EGG_MCP_TOKEN", "EGG_MCP_WORKSPACE", "HOME"]},
                                    timeout_s=60, uses_gpu=False, wrapper_argv=[str(tool), "--"])
        finally:
            await ev.aclose()

    outcome = asyncio.run(main())
    assert outcome.ok, (outcome.error, outcome.stderr_tail)
    assert outcome.result == {f"read {db}": "PermissionError", f"read {secret}": "PermissionError",
                              f"write {db}": "PermissionError", f"write {outside}": "PermissionError",
                              "write ok.txt": "ok",  # its own dir stays writable
                              "env EGG_MCP_TOKEN": "unset", "env EGG_MCP_WORKSPACE": "unset", "env HOME": "set"}
    assert db.read_bytes() == b"SQLite format 3\x00 stand-in" and not outside.exists()
    sandbox = outcome.sandbox
    assert sandbox is not None and sandbox["fs_confined"] and sandbox["level"] in ("landlock", "landlock+ns")
    assert sandbox["wrapped_by"] == "fake_ncu.py" and sandbox["env_allowlist"] is True
    if sandbox["landlock_abi"] >= 6:  # signals always scoped; abstract sockets unless the operator opened them
        assert sandbox["signals_scoped"] and sandbox["abstract_sockets_scoped"] == (ipc == "default")
    if sandbox["landlock_abi"] >= 4:  # TCP denied; with ipc=open, only on the tool's ports
        assert sandbox["network_confined"]
        assert sandbox["tcp_ports_allowed"] == ([] if ipc == "default" else list(range(49152, 49216)))


def test_an_unwrapped_job_reports_its_sandbox_too(tmp_path):
    async def main():
        ev = WorkerEvaluator(scratch_dir=tmp_path, force_interpreter=True, spare_workers=0)
        try:
            return await ev.run_job("tests.doubles.jobs:echo", {"x": 1}, timeout_s=60, uses_gpu=False)
        finally:
            await ev.aclose()

    outcome = asyncio.run(main())
    assert outcome.ok and outcome.sandbox is not None and outcome.sandbox["level"] != "none", outcome.sandbox


def test_tool_ports_follow_the_tools_options():
    from egg_mcp.evaluation.tool_confine import tool_ports, tool_root

    assert tool_ports([])[:2] == [49152, 49153] and len(tool_ports([])) == 64
    assert tool_ports(["ncu", "--port", "50000", "--max-connections", "80"])[-1] == 50079
    assert tool_root("/opt/nvidia/nsight-compute/2025.3.0/ncu") == "/opt/nvidia/nsight-compute/2025.3.0"
    assert tool_root("/usr/bin/env") is None  # /usr is readable anyway
    home = os.path.expanduser("~")
    assert tool_root(home + "/bin/ncu", avoid=[home]) == os.path.realpath(home + "/bin")  # never the whole home
    assert tool_root("/srv/jobs/ncu", avoid=["/srv/jobs/worker-1"]) is None  # never the job's own tree
