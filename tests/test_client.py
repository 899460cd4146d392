"""tools/egg_client.py: argument handling, and the real server over stdio and over HTTP."""

from __future__ import annotations

import importlib.util
import json
import shlex
import subprocess
import sys

import pytest

from tests.conftest import FIXTURES, REPO, SANDBOX_OPT_IN_ARGS
from tests.http_server import free_port, wait_listening

CLIENT = REPO / "tools" / "egg_client.py"


def _load_client():
    spec = importlib.util.spec_from_file_location("egg_client", CLIENT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_file_arguments_are_expanded(tmp_path):
    client = _load_client()
    (tmp_path / "k.py").write_text("class ModelNew: pass\n")
    args = {"source": "@k.py", "note": "@@literal", "nested": {"list": ["@k.py", 3]}, "n": 1}
    out = client.expand_file_args(args, base=tmp_path)
    assert out == {"source": "class ModelNew: pass\n", "note": "@literal",
                   "nested": {"list": ["class ModelNew: pass\n", 3]}, "n": 1}
    with pytest.raises(client.UsageError, match="cannot read"):
        client.expand_file_args({"source": "@missing.py"}, base=tmp_path)


def test_json_arguments_are_checked():
    client = _load_client()
    assert client.parse_json_args(None) == {} and client.parse_json_args('{"a": 1}') == {"a": 1}
    with pytest.raises(client.UsageError, match="not valid JSON"):
        client.parse_json_args("{task_id: 1}")
    with pytest.raises(client.UsageError, match="JSON object"):
        client.parse_json_args("[1, 2]")


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CLIENT), *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def test_usage_errors_exit_2_before_starting_anything():
    proc = _run("call", "list_tasks")
    assert proc.returncode == 2 and "--stdio" in proc.stderr
    proc = _run("--url", "http://127.0.0.1:9/mcp", "call", "verify", "{bad json")
    assert proc.returncode == 2 and "not valid JSON" in proc.stderr


@pytest.mark.slow
def test_stdio_transport_end_to_end(tmp_path):
    server = shlex.join([sys.executable, "-m", "egg_mcp", "serve", "--workspace", str(tmp_path / "ws"),
                         "--interpreter", "--log-level", "WARNING", *SANDBOX_OPT_IN_ARGS])
    tools = _run("--stdio", server, "tools")
    assert tools.returncode == 0, tools.stderr
    names = {t["name"] for t in json.loads(tools.stdout)["tools"]}
    assert {"start_task", "verify", "commit_stage", "propose_tiling"} <= names

    started = _run("--stdio", server, "call", "start_task", '{"reference": "softmax", "k_seeds": 1}')
    assert started.returncode == 0, started.stderr
    task_id = json.loads(started.stdout)["task_id"]

    seed = FIXTURES / "softmax" / "row_per_program.py"
    verified = _run("--stdio", server, "--compact", "call", "verify",
                    json.dumps({"task_id": task_id, "source": f"@{seed}", "note": "from a file"}))
    assert verified.returncode == 0, verified.stderr
    result = json.loads(verified.stdout)
    assert result["verdict"] == "correct" and len(verified.stdout.strip().splitlines()) == 1

    read = _run("--stdio", server, "read", f"egg://tasks/{task_id}/candidates/{result['candidate_id']}/source")
    assert read.returncode == 0 and json.loads(read.stdout)["contents"][0]["text"] == seed.read_text()

    prompts = _run("--stdio", server, "prompts")
    assert "seeds_code" in {p["name"] for p in json.loads(prompts.stdout)["prompts"]}
    resources = _run("--stdio", server, "resources")
    assert "egg://tasks/{task_id}/context" in {t["uriTemplate"] for t in
                                               json.loads(resources.stdout)["resource_templates"]}

    failed = _run("--stdio", server, "call", "task_status", '{"task_id": "t-nope"}')
    assert failed.returncode == 1 and "unknown task id" in failed.stderr and failed.stdout == ""


@pytest.mark.slow
def test_http_transport_with_a_token(tmp_path):
    port, token = free_port(), "tok-123"
    proc = subprocess.Popen([sys.executable, "-m", "egg_mcp", "serve", "--http", "--port", str(port), "--token", token,
                             "--workspace", str(tmp_path / "ws"), "--interpreter"], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_listening(port, proc)
        url = f"http://127.0.0.1:{port}/mcp"
        started = _run("--url", url, "--token", token, "call", "start_task", '{"reference": "softmax"}')
        assert started.returncode == 0, started.stderr
        task_id = json.loads(started.stdout)["task_id"]
        listed = _run("--url", url, "--token", token, "call", "list_tasks")
        assert [t["task_id"] for t in json.loads(listed.stdout)["tasks"]] == [task_id]
        status = _run("--url", url, "--token", token, "call", "task_status", json.dumps({"task_id": task_id}))
        assert json.loads(status.stdout)["stage"] == "SEEDS"
        refused = _run("--url", url, "--token", token, "call", "propose_tiling",
                       json.dumps({"task_id": task_id, "candidate_id": "c-x"}))
        assert refused.returncode == 1 and "not allowed in stage SEEDS" in refused.stderr
        wrong = _run("--url", url, "--token", "wrong", "call", "list_tasks", timeout=120)
        assert wrong.returncode == 2 and "could not talk to the server" in wrong.stderr
        # the 401's reason reaches the user, not just "Server returned an error response"
        assert "HTTP 401: missing or wrong bearer token" in wrong.stderr and "Authorization: Bearer" in wrong.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=30)
