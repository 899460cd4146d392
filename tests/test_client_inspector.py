"""A client nobody here wrote: the MCP Inspector's CLI mode, over stdio and over streamable HTTP.

Needs node + npm (CI has node 20). The inspector is installed once per session into a temporary
folder (`npm install --prefix`), or taken from $EGG_MCP_INSPECTOR (path to its `mcp-inspector` bin).
Runs only with `pytest --network` (it fetches the Inspector from npm's registry); skipped cleanly when npm,
the registry or the package is unavailable.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

PACKAGE = "@modelcontextprotocol/inspector"
INSTALL_TIMEOUT_S = 240


@pytest.fixture(scope="session")
def inspector(tmp_path_factory) -> list[str]:
    given = os.environ.get("EGG_MCP_INSPECTOR")
    if given:
        return [given]
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("node/npm not installed: the MCP Inspector CLI test needs them")
    prefix = tmp_path_factory.mktemp("inspector")
    try:
        proc = subprocess.run([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel=error",
                               PACKAGE], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.skip(f"npm install {PACKAGE} took more than {INSTALL_TIMEOUT_S}s (no registry access?)")
    binary = prefix / "node_modules" / ".bin" / "mcp-inspector"
    if proc.returncode != 0 or not binary.exists():
        pytest.skip(f"could not install {PACKAGE}: {proc.stderr.strip()[-500:]}")
    return [str(binary)]


def _inspect(inspector: list[str], target: list[str], *method: str, timeout: float = 240) -> dict:
    proc = subprocess.run([*inspector, "--cli", *target, "--method", *method], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"inspector failed ({proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
    return json.loads(proc.stdout)


def _check_session(inspector: list[str], target: list[str]) -> None:
    tools = {t["name"]: t for t in _inspect(inspector, target, "tools/list")["tools"]}
    assert {"start_task", "generate_seeds", "verify", "commit_stage", "export_kernel"} <= set(tools)
    assert tools["verify"].get("outputSchema"), "tools publish output schemas"
    started = _inspect(inspector, target, "tools/call", "--tool-name", "start_task", "--tool-arg", "reference=softmax")
    assert started.get("isError") is False
    task = started["structuredContent"]
    assert task["task_id"].startswith("t-") and task["stage"] == "SEEDS" and task["brief"]
    status = _inspect(inspector, target, "tools/call", "--tool-name", "task_status", "--tool-arg",
                      f"task_id={task['task_id']}")
    assert status["structuredContent"]["stage"] == "SEEDS"
    prompts = {p["name"] for p in _inspect(inspector, target, "prompts/list")["prompts"]}
    assert "seeds_code" in prompts


@pytest.mark.network
def test_inspector_over_stdio(inspector, tmp_path):
    server = [sys.executable, "-m", "egg_mcp", "serve", "--workspace", str(tmp_path / "ws"), "--interpreter"]
    _check_session(inspector, server)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.network
def test_inspector_over_http(inspector, tmp_path):
    port = _free_port()
    token = "inspector-token-0123456789"  # every HTTP mode needs one (issue 28)
    proc = subprocess.Popen([sys.executable, "-m", "egg_mcp", "serve", "--http", "--port", str(port), "--workspace",
                             str(tmp_path / "ws"), "--interpreter"], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, EGG_MCP_TOKEN=token))
    try:
        deadline = time.time() + 60
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"server exited: {proc.stderr.read()}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.time() < deadline, "server did not start listening"
            time.sleep(0.2)
        target = [f"http://127.0.0.1:{port}/mcp", "--transport", "http", "--header", f"Authorization: Bearer {token}"]
        probe = subprocess.run([*inspector, "--cli", *target, "--method", "tools/list"], cwd=REPO,
                               capture_output=True, text=True, timeout=240)
        if "Arguments cannot be passed to a URL-based MCP server" in probe.stdout + probe.stderr:
            # npm installs Inspector 0.15.0 on Node < 22.7.5 (every later release requires it), and its CLI has
            # no --header: it cannot send the token every HTTP mode needs. The stdio test above still runs.
            pytest.skip("this MCP Inspector cannot send an Authorization header (Node < 22.7.5 gets Inspector "
                        "0.15.0); run with Node >= 22.7.5 or point EGG_MCP_INSPECTOR at a newer inspector")
        _check_session(inspector, target)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_docs_snippet_matches_these_commands():
    """docs/inspector.md shows the commands exercised above."""
    doc = (Path(REPO) / "docs" / "inspector.md").read_text()
    for needle in ("--cli", "--method tools/list", "--tool-name start_task", "--transport http"):
        assert needle in doc, needle
