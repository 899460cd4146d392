"""Scratch lives outside the workspace, and what a killed server left there is removed at the next start (a live
server's never is)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from egg_mcp.config import ServerConfig, default_scratch_dir
from egg_mcp.evaluation import runner_process
from egg_mcp.workspace.scratch import RUNNER_DIRS_FILE, SCRATCH_OWNER_FILE, private_scratch
from egg_mcp.workspace.store import Workspace


def test_default_scratch_is_outside_the_workspace_and_per_workspace(tmp_path, monkeypatch):
    monkeypatch.delenv("EGG_MCP_SCRATCH", raising=False)
    a, b = tmp_path / "ws-a", tmp_path / "ws-b"
    sa, sb = default_scratch_dir(a), default_scratch_dir(b)
    assert sa != sb and sa.parent == sb.parent and sa.parent.name == f"egg-mcp-{os.getuid()}"
    assert not str(sa).startswith(str(a)) and not str(sa).startswith(str(tmp_path))
    assert ServerConfig(workspace=a).scratch_dir() == sa
    ws = Workspace(a)
    try:
        assert ws.scratch == sa and sa.is_dir() and not (a / "scratch").exists()
        assert (os.stat(sa).st_mode & 0o777) == 0o700 and (os.stat(sa.parent).st_mode & 0o077) == 0
    finally:
        ws.close()
    monkeypatch.setenv("EGG_MCP_SCRATCH", str(tmp_path / "mine"))
    assert ServerConfig(workspace=a).scratch_dir() == tmp_path / "mine"
    assert ServerConfig(workspace=a, scratch=tmp_path / "x").scratch_dir() == tmp_path / "x"


def test_a_planted_scratch_base_is_not_used(tmp_path):
    """Another user's (here: a symlinked) egg-mcp-<uid> folder in a shared temp dir: the workspace's own
    scratch folder is used instead."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (shared / f"egg-mcp-{os.getuid()}").symlink_to(tmp_path / "elsewhere")
    got = private_scratch(shared / f"egg-mcp-{os.getuid()}" / "abc", tmp_path / "ws")
    assert got == tmp_path / "ws" / "scratch" and not (tmp_path / "elsewhere" / "abc").exists()


def _runner_dir(base: Path, name: str) -> Path:
    d = base / name
    for sub in ("home", "tmp", "triton_cache"):
        (d / sub).mkdir(parents=True)
    (d / "tmp" / "big.bin").write_bytes(b"x" * 1000)
    return d


def test_runner_dirs_a_killed_judge_listed_are_removed_and_a_live_ones_kept(tmp_path, monkeypatch):
    assert RUNNER_DIRS_FILE == runner_process.RUNNER_DIRS_FILE
    temp = tmp_path / "systmp"
    temp.mkdir()
    scratch = tmp_path / "scratch"
    dead_judge = scratch / "worker-interp-dead"
    live_judge = scratch / "worker-interp-live"
    for d in (dead_judge, live_judge):
        d.mkdir(parents=True)
    stale = _runner_dir(temp, "tmpstale")
    busy = _runner_dir(temp, "tmpbusy")  # listed by the dead judge, but a process still works in it
    stranger = temp / "tmpstranger"  # listed, but not a runner's dir (the name was reused)
    (stranger / "data").mkdir(parents=True)
    link = temp / "tmplink"
    link.symlink_to(_runner_dir(tmp_path, "target"))
    kept_by_live = _runner_dir(temp, "tmplive")
    (dead_judge / RUNNER_DIRS_FILE).write_text(
        "\n".join(map(str, [stale, busy, stranger, link, "relative/x", temp / "gone"])) + "\n")
    (live_judge / RUNNER_DIRS_FILE).write_text(f"{kept_by_live}\n")
    old = time.time() - 600
    for d in (dead_judge, live_judge):
        os.utime(d, (old, old))
    sleepers = [subprocess.Popen(["sleep", "60"], cwd=busy / "tmp"), subprocess.Popen(["sleep", "60"], cwd=live_judge)]
    try:
        ws = Workspace(tmp_path / "ws", scratch=scratch)
        try:
            assert sorted(ws.scratch_removed) == sorted([stale, dead_judge])
            assert not stale.exists() and not dead_judge.exists()
            assert busy.exists() and stranger.exists() and (tmp_path / "target" / "tmp" / "big.bin").exists()
            assert kept_by_live.exists() and live_judge.exists()
        finally:
            ws.close()
    finally:
        for p in sleepers:
            p.kill()
            p.wait()


def test_a_runner_lists_its_private_dir_in_the_judges_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = runner_process.RunnerProcess("interp", tmp_path)
    try:
        listed = (tmp_path / runner_process.RUNNER_DIRS_FILE).read_text().splitlines()
        assert listed == [str(runner.private)] and runner.private.is_dir()
        assert not str(runner.private).startswith(str(tmp_path))  # the temp dir, not the judge's (or a workspace)
    finally:
        runner.kill()
    assert not runner.private.exists()


def test_the_scratch_dir_flag_and_doctor_use_the_same_folder(tmp_path, monkeypatch):
    from egg_mcp.cli import build_parser, config_from_args
    from egg_mcp.workspace.health import workspace_health

    monkeypatch.delenv("EGG_MCP_SCRATCH", raising=False)
    args = build_parser().parse_args(["doctor", "--workspace", str(tmp_path / "ws"), "--scratch-dir",
                                      str(tmp_path / "s")])
    config = config_from_args(args)
    assert config.scratch_dir() == tmp_path / "s"
    dead = tmp_path / "s" / "worker-interp-dead"
    dead.mkdir(parents=True)
    old = time.time() - 600
    os.utime(dead, (old, old))
    lines = workspace_health(config.workspace, scratch=config.scratch_dir())
    assert not dead.exists()
    assert any(what == "scratch" and str(tmp_path / "s") in detail for _, what, detail in lines)


def test_the_scratch_of_a_deleted_workspace_is_removed_at_the_next_start(tmp_path):
    base = tmp_path / "systmp" / f"egg-mcp-{os.getuid()}"
    gone_ws, kept_ws, busy_ws = tmp_path / "gone", tmp_path / "kept", tmp_path / "busy"
    made = {}
    for ws in (gone_ws, kept_ws, busy_ws):
        made[ws] = private_scratch(base / ws.name, ws)
        assert (made[ws] / SCRATCH_OWNER_FILE).read_text() == str(ws.resolve())
        (made[ws] / "worker-interp-x").mkdir()
    foreign = base / "notours"  # no owner file: never touched
    foreign.mkdir()
    old = time.time() - 600
    for d in (*made.values(), foreign):
        os.utime(d, (old, old))
    # kept_ws exists; gone_ws and busy_ws do not (busy: a process still works in its scratch)
    kept_ws.mkdir()
    sleeper = subprocess.Popen(["sleep", "60"], cwd=made[busy_ws] / "worker-interp-x")
    try:
        ws = Workspace(tmp_path / "current", scratch=base / "current")
        try:
            assert made[gone_ws] in ws.scratch_removed and not made[gone_ws].exists()
            assert made[kept_ws].exists() and made[busy_ws].exists() and foreign.exists()
        finally:
            ws.close()
    finally:
        sleeper.kill()
        sleeper.wait()
