"""Streamable HTTP: loopback by default, a bearer token required (and enforced) on every HTTP mode.
(Until issue 28 loopback served without a token and 0.0.0.0 without one was refused; now a token is
always in force: generated and printed when EGG_MCP_TOKEN is unset.)"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import REPO
from tests.http_server import free_port, wait_listening

pytestmark = pytest.mark.slow


def _serve(tmp_path, *extra: str, token: str | None = None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "EGG_MCP_TOKEN"}
    if token:
        env["EGG_MCP_TOKEN"] = token
    return subprocess.Popen(
        [sys.executable, "-m", "egg_mcp", "serve", "--http", "--workspace", str(tmp_path / "ws"), "--interpreter",
         *extra], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_beyond_loopback_without_token_serves_with_a_generated_one(tmp_path):
    """Changed on purpose: no token given is no longer refusal beyond loopback; a token is generated."""
    port = free_port()
    proc = _serve(tmp_path, "--host", "0.0.0.0", "--port", str(port))
    try:
        wait_listening(port, proc)
        req = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=b"{}", method="POST",
                                     headers={"content-type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(req, timeout=10)
        assert info.value.code == 401
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "generated token" in err


def test_bearer_token_is_enforced(tmp_path):
    port = free_port()
    token = "s3cret-token-of-enough-length"
    proc = _serve(tmp_path, "--host", "0.0.0.0", "--port", str(port), token=token)
    try:
        wait_listening(port, proc)
        url = f"http://127.0.0.1:{port}/mcp"
        req = urllib.request.Request(url, data=b"{}", method="POST", headers={"content-type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(req, timeout=10)
        assert info.value.code == 401
        req.add_header("authorization", "Bearer wrong")
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(req, timeout=10)
        assert info.value.code == 401

        async def unauthorized():
            """The SDK client shows the server's 401 text (a JSON-RPC error body), not a bare error response."""
            try:
                async with Client(url) as client:
                    await client.list_tools()
            except BaseException as exc:  # noqa: BLE001 - anyio wraps the MCPError in exception groups
                return repr(exc)
            return "no error"

        assert "HTTP 401: missing or wrong bearer token" in anyio.run(unauthorized)

        async def main():
            async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=60) as http:
                async with Client(streamable_http_client(url, http_client=http)) as client:
                    tools = {t.name for t in (await client.list_tools()).tools}
                    assert {"start_task", "verify", "commit_stage"} <= tools
                    result = await client.call_tool("list_tasks", {})
                    assert not result.is_error

        anyio.run(main)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_loopback_rejects_foreign_host_header(tmp_path):
    """With the token (loopback needs one now): a foreign Host header is still refused."""
    port = free_port()
    token = "loopback-token-0123456789"
    proc = _serve(tmp_path, "--port", str(port), token=token)
    try:
        wait_listening(port, proc)
        req = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=b"{}", method="POST",
                                     headers={"content-type": "application/json", "host": "evil.example:80",
                                              "authorization": f"Bearer {token}"})
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(req, timeout=10)
        assert info.value.code in (400, 403, 421)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
