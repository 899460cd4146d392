"""A bounded random fuzz of malformed JSON-RPC over loopback stdio and HTTP: every message gets a
reply within 1 s (an error, not silence), the server stays up and the workspace loses nothing."""

from __future__ import annotations

import json
import os
import random
import select
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tests.conftest import REPO
from tests.http_server import free_port, wait_listening

pytestmark = pytest.mark.slow

N_MESSAGES = 60
REPLY_WITHIN_S = 1.0
PROTOCOL = "2025-06-18"


def _request(i: int, method: str, params) -> dict:
    return {"jsonrpc": "2.0", "id": i, "method": method, "params": params}


def malformed(rng: random.Random, i: int, task_id: str) -> tuple[bytes, object]:
    """One malformed message and the id its reply must carry (None: not recoverable)."""
    call = _request(i, "tools/call", {"name": "task_status", "arguments": {"task_id": task_id}})
    kind = rng.randrange(9)
    if kind == 0:
        return bytes(rng.choice(b"abcxyz{}[]:,\"' 0123456789") for _ in range(rng.randrange(1, 80))) + b"x", None
    if kind == 1:
        text = json.dumps(call)
        return text[: rng.randrange(1, len(text) - 1)].encode(), None
    if kind == 2:
        call["params"] = rng.choice([["task_status"], 3, "task_status", None, True])
        return json.dumps(call).encode(), i
    if kind == 3:
        surrogate = "\\u" + format(rng.randrange(0xD800, 0xE000), "x")
        text = json.dumps(call).replace(task_id, task_id + surrogate)
        return text.encode(), i
    if kind == 4:
        text = json.dumps(_request(i, "tools/call", {"name": "start_task", "arguments": {
            "reference": "softmax", "atol": 1.0}})).replace("1.0", rng.choice(["NaN", "Infinity", "-1", "1e309", "0"]))
        return text.encode(), i
    if kind == 5:
        return json.dumps(_request(i, "tools/call", {"name": rng.choice(["task_status", "get_context", "verify"]),
                                                     "arguments": {"task_id": "t-" + "x" * rng.choice([5, 100_000]),
                                                                   "source": "x"}})).encode(), i
    if kind == 6:
        depth = rng.choice([50, 5000])
        return (b"[" * depth + b"]" * depth), None
    if kind == 7:
        return json.dumps({"jsonrpc": "2.0", "id": {"nested": i}, "method": "tools/list"}).encode(), None
    return json.dumps(_request(i, "tools/call", {"name": "commit_stage", "arguments": {
        "task_id": task_id, "candidate_id": "c-nope", "decision": {"summary": "s" * rng.choice([10, 5000])},
        "stage": rng.choice(["BOGUS", "TILING", 7])}})).encode(), i


def _serve(ws, *extra):
    return subprocess.Popen([sys.executable, "-m", "egg_mcp", "serve", "--workspace", str(ws), "--interpreter",
                             "--log-level", "WARNING", *extra], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=dict(os.environ,
                                                                                        PYTHONPATH=str(REPO)))


class Stdio:
    def __init__(self, proc):
        self.proc = proc

    def send(self, line: bytes) -> None:
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def recv(self, timeout: float) -> dict | None:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return json.loads(self.proc.stdout.readline()) if ready else None

    def call(self, i: int, method: str, params: dict, timeout: float = 120) -> dict:
        self.send(json.dumps(_request(i, method, params)).encode())
        reply = self.recv(timeout)
        assert reply is not None and reply.get("id") == i, reply
        return reply


def test_stdio_answers_every_malformed_message_within_a_second(tmp_path):
    proc = _serve(tmp_path / "ws")
    io = Stdio(proc)
    try:
        io.call(0, "initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                                  "clientInfo": {"name": "fuzz", "version": "1"}})
        io.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        started = io.call(1, "tools/call", {"name": "start_task", "arguments": {"reference": "softmax"}})
        task_id = started["result"]["structuredContent"]["task_id"]
        rng = random.Random(13)
        t_end = time.monotonic() + 120
        for i in range(100, 100 + N_MESSAGES):
            assert time.monotonic() < t_end, "fuzz ran past its time bound"
            line, expected_id = malformed(rng, i, task_id)
            t0 = time.monotonic()
            io.send(line)
            reply = io.recv(REPLY_WITHIN_S)
            assert reply is not None, f"no reply within {REPLY_WITHIN_S} s to {line[:120]!r}"
            assert reply.get("id") == expected_id, (line[:200], reply)
            failed = "error" in reply or reply.get("result", {}).get("isError")
            assert failed, (line[:200], reply)
            assert time.monotonic() - t0 < REPLY_WITHIN_S
        status = io.call(9999, "tools/call", {"name": "task_status", "arguments": {"task_id": task_id}})
        assert status["result"]["structuredContent"]["stage"] == "SEEDS"
        listed = io.call(10000, "tools/call", {"name": "list_tasks", "arguments": {}})
        assert [t["task_id"] for t in listed["result"]["structuredContent"]["tasks"]] == [task_id]
    finally:
        proc.kill()
        proc.wait()


HTTP_TOKEN = "fuzz-token-0123456789abcdef"


def _post(url: str, body: bytes, session: str | None, timeout: float) -> tuple[int, str, dict]:
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
               "mcp-protocol-version": PROTOCOL, "authorization": f"Bearer {HTTP_TOKEN}"}
    if session:
        headers["mcp-session-id"] = session
    req = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace"), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace"), dict(exc.headers)


def _messages(body: str) -> list[dict]:
    """JSON body or SSE `data:` lines."""
    body = body.strip()
    if body.startswith("{"):
        return [json.loads(body)]
    return [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:") and line[5:].strip()]


def test_http_answers_every_malformed_message_within_a_second(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "egg_mcp", "serve", "--workspace", str(tmp_path / "ws"),
                             "--interpreter", "--log-level", "WARNING", "--http", "--port", str(port)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=dict(os.environ, PYTHONPATH=str(REPO), EGG_MCP_TOKEN=HTTP_TOKEN))
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_listening(port, proc)
        status, body, headers = _post(url, json.dumps(_request(0, "initialize", {
            "protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}})).encode(),
            None, 60)
        assert status == 200, body
        session = {k.lower(): v for k, v in headers.items()}.get("mcp-session-id")
        _post(url, b'{"jsonrpc":"2.0","method":"notifications/initialized"}', session, 10)
        rng = random.Random(13)
        for i in range(100, 100 + N_MESSAGES):
            line, expected_id = malformed(rng, i, "t-00000000")
            t0 = time.monotonic()
            status, body, _ = _post(url, line, session, REPLY_WITHIN_S + 1)
            elapsed = time.monotonic() - t0
            assert elapsed < REPLY_WITHIN_S, (elapsed, line[:120])
            msgs = _messages(body)
            assert msgs, (status, body[:300], line[:120])
            assert "error" in msgs[-1] or msgs[-1].get("result", {}).get("isError"), (line[:200], msgs)
        status, body, _ = _post(url, json.dumps(_request(1, "tools/call", {"name": "list_tasks",
                                                                           "arguments": {}})).encode(),
                                session, 30)
        assert status == 200 and _messages(body)[-1]["result"]["structuredContent"]["tasks"] == []
    finally:
        proc.kill()
        proc.wait()
