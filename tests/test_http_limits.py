"""Serving over HTTP: a token on every request (loopback too), and limits that hold under slow clients.

Each server is a real `egg-mcp serve --http --port 0` subprocess; its stderr goes to a file (a flood of
log lines into an undrained pipe would block it) from which the printed token and URL are read.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time

import pytest

from egg_mcp.transport import auth
from egg_mcp.transport.acceptor import Acceptor
from egg_mcp.transport.connection_guard import ConnectionGuard, HttpLimits
from egg_mcp.transport.http import RateLimitedLogFilter, guarded_protocol, tcp_listener
from tests.http_flood import TOKEN_HOLDER, fd_count, flood, open_session, post, start_server, timed_calls

pytestmark = pytest.mark.slow

LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


@pytest.fixture
def server(tmp_path):
    started = []

    def start(*extra, env=None):
        proc, url, token = start_server(tmp_path / "ws", tmp_path / f"server{len(started)}.err", *extra, env=env)
        started.append(proc)
        return proc, url, token, tmp_path / f"server{len(started) - 1}.err"

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(timeout=30)


def test_loopback_needs_the_printed_token(server):
    env = {k: v for k, v in os.environ.items() if k != "EGG_MCP_TOKEN"}
    proc, url, token, err = server(env=env)
    assert url.startswith("http://127.0.0.1:")
    assert token and len(token) >= 40, "a generated token is printed once at start"
    banner = err.read_text()
    assert banner.count(token) == 3  # the line itself, the client config JSON and the Inspector --header form
    config = json.loads(next(line for line in banner.splitlines() if line.startswith('{"mcpServers"')))
    assert config["mcpServers"]["egg"]["headers"]["Authorization"] == f"Bearer {token}"
    assert f"--header 'Authorization: Bearer {token}'" in banner
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    for wrong in (None, "", "wrong", token[:-1], token + "x", token.upper() if token.upper() != token else "X"):
        status, body, headers = post(url, wrong, init)
        assert status == 401, (wrong, status, body)
        assert "mcp-session-id" not in headers and "bearer token" in body
        status, body, _ = post(url, wrong, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                            "params": {"name": "list_tasks", "arguments": {}}})
        assert status == 401
    session = open_session(url, token)
    status, body, _ = post(url, token, LIST, session)
    assert status == 200 and "start_task" in body
    assert token not in err.read_text().split("session manager started", 1)[-1], "the token is printed once"


def test_unauthenticated_call_runs_nothing(server, tmp_path):
    """A start_task whose reference would write a file at import: refused with 401, no file appears."""
    proc, url, token, _ = server("--allow-dir", str(tmp_path))
    marker = tmp_path / "pwned"
    ref = tmp_path / "ref.py"
    ref.write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    status, _, _ = post(url, "nope", {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                      "params": {"name": "start_task", "arguments": {"reference": str(ref)}}})
    assert status == 401
    time.sleep(0.5)
    assert not marker.exists()


def test_token_from_environment_is_used_and_not_echoed(server):
    secret = "env-token-" + "k" * 30
    proc, url, token, err = server(env={**os.environ, "EGG_MCP_TOKEN": secret})
    assert token == secret
    assert secret not in err.read_text()
    assert post(url, None, LIST)[0] == 401
    assert open_session(url, secret)


def test_unix_socket_is_private_and_needs_the_token(tmp_path):
    import stat
    import subprocess
    import sys

    import httpx2

    from tests.conftest import REPO

    path = tmp_path / "egg.sock"
    err = tmp_path / "uds.err"
    with open(err, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "egg_mcp", "serve", "--http", "--uds", str(path), "--workspace",
                                 str(tmp_path / "ws"), "--interpreter"], cwd=REPO, stderr=fh,
                                env={k: v for k, v in os.environ.items() if k != "EGG_MCP_TOKEN"})
    try:
        deadline = time.time() + 90
        while "session manager started" not in err.read_text() and time.time() < deadline:
            assert proc.poll() is None, err.read_text()
            time.sleep(0.2)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        token = next(line for line in err.read_text().splitlines() if "generated token" in line).rsplit(" ", 1)[-1]
        with httpx2.Client(transport=httpx2.HTTPTransport(uds=str(path)), base_url="http://localhost") as http:
            assert http.post("/mcp", json=LIST).status_code == 401
            r = http.post("/mcp", headers={"authorization": f"Bearer {token}",
                                           "accept": "application/json, text/event-stream"},
                          json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                              "protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "t", "version": "1"}}})
            assert r.status_code == 200, r.text
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_token_compare_is_constant_time(monkeypatch):
    """The middleware compares with hmac.compare_digest, on every request."""
    import anyio

    calls = []
    real = auth.hmac.compare_digest
    monkeypatch.setattr(auth.hmac, "compare_digest", lambda a, b: calls.append((a, b)) or real(a, b))
    reached = []

    async def app(scope, receive, send):
        reached.append(scope["path"])

    mw = auth.BearerTokenMiddleware(app, "t0ken")
    sent = []

    async def send(message):
        sent.append(message)

    async def go():
        await mw({"type": "http", "path": "/a", "headers": [(b"authorization", b"Bearer nope")]}, None, send)
        await mw({"type": "http", "path": "/b", "headers": [(b"authorization", b"Bearer t0ken")]}, None, send)

    anyio.run(go)
    assert calls == [(b"Bearer nope", b"Bearer t0ken"), (b"Bearer t0ken", b"Bearer t0ken")]
    assert reached == ["/b"] and sent[0]["status"] == 401
    with pytest.raises(ValueError):
        auth.BearerTokenMiddleware(app, "")


def test_oversized_body_refused(server):
    proc, url, token, _ = server()
    session = open_session(url, token)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:  # declared size: refused unread
        s.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {64 * 2**20}\r\n\r\n".encode())
        reply = s.recv(4096).decode()
        assert reply.startswith("HTTP/1.1 413"), reply
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:  # no size declared: cut off at the cap
        s.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
                  f"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
        chunk = b"%x\r\n" % 2**20 + b"a" * 2**20 + b"\r\n"
        try:
            for _ in range(40):
                s.sendall(chunk)
        except OSError:
            pass
        reply = s.recv(4096).decode()
        assert reply.startswith("HTTP/1.1 413") and "body larger than" in reply, reply
    status, body, _ = post(url, token, LIST, session)
    assert status == 200


def test_header_and_body_timeouts(server):
    proc, url, token, _ = server("--header-timeout", "1", "--body-timeout", "1")
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        t0 = time.monotonic()
        for _ in range(10):  # trickling bytes does not reset the header timeout
            try:
                s.sendall(b"G")
            except OSError:
                break
            time.sleep(0.2)
        s.settimeout(5)
        rest = s.recv(4096) if True else b""
        assert rest == b"" and time.monotonic() - t0 < 4
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
                  f"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                  f"Content-Length: 1000\r\n\r\n{{".encode())
        s.settimeout(6)
        t0 = time.monotonic()
        reply = s.recv(4096).decode()
        assert reply.startswith("HTTP/1.1 408"), reply
        assert time.monotonic() - t0 < 4


def test_log_rate_limit_filter_bounds_a_flood():
    now = [0.0]
    flt = RateLimitedLogFilter(burst=5, per_s=10.0, clock=lambda: now[0])

    def rec():
        return logging.LogRecord("uvicorn.error", logging.WARNING, __file__, 1, "Invalid HTTP request received.",
                                 None, None)

    passed = [flt.filter(r := rec()) and r for _ in range(10_000)]
    assert sum(1 for p in passed if p) == 5
    now[0] = 10.0
    r = rec()
    assert flt.filter(r) and "9995 similar messages suppressed" in r.getMessage()


def test_slow_client_flood_keeps_authenticated_client_answered_and_log_bounded(server):
    """A few thousand half-open sockets (partial head, then silence) from 8 loopback addresses, 127.0.0.1
    among them, against caps below the flood, with the header timeout firing during the run; and a burst
    of garbage requests. An authenticated client calls tools/list throughout: every answer within 2 s;
    the server's descriptors stay under its cap; its log stays small."""
    cap, per_client, flood_n = 1500, 250, 1600
    proc, url, token, err = server("--max-connections", str(cap), "--max-connections-per-client", str(per_client),
                                   "--header-timeout", "4")
    TOKEN_HOLDER["token"] = token
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    session = open_session(url, token)
    import threading

    stats: dict = {}
    t = threading.Thread(target=lambda: stats.update(flood(port, flood_n, 14)), daemon=True)
    t.start()
    time.sleep(4)
    garbage_at = time.monotonic()
    for _ in range(300):  # invalid HTTP and unauthenticated requests: each would be one log line unlimited
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"\x00\x01 garbage\r\n\r\n")
            s.recv(100)
    assert time.monotonic() - garbage_at < 20
    fds = [fd_count(proc.pid)]
    result = timed_calls(url, token, 2, 15, pause_s=0.2, timeout=5, sessions=[session, open_session(url, token)])
    fds.append(fd_count(proc.pid))
    t.join(timeout=40)
    assert result["failures"] == 0, (result["failure_examples"], result)
    assert result["max_s"] < 2.0, result
    assert stats["max_connected"] >= cap * 0.9, stats
    assert stats["closed_by_server"] > 100, stats  # evictions (per-client cap) and header timeouts happened
    assert max(fds) <= cap + 300, fds  # connections held + the server's own descriptors
    log = err.read_bytes()
    assert b"HTTP limits: file descriptors" in log and b"connections 1500 in total, 250 per client" in log, \
        "the server says at start what it holds at most"
    assert len(log) < 64 * 1024, len(log)
    assert b"suppressed" in log or log.count(b"\n") < 200
    status, body, _ = post(url, token, LIST, session)
    assert status == 200


class _Conn:
    """A stand-in connection for ConnectionGuard (what the guarded protocol gives it)."""

    _egg_counted = False
    _egg_closing = False

    def __init__(self, client="c", seen_data=True):
        self._egg_client, self._egg_seen_data = client, seen_data
        self.aborted = False
        self.transport = self

    def abort(self):
        self.aborted = True


def test_guard_paces_evictions_at_the_cap_and_logs_one_summary_line(caplog):
    """At the cap every new connection closes a waiting one; those closings are paced (the Acceptor leaves
    the listening socket alone for `accept_delay`), and they are counted, not logged one by one."""
    import asyncio

    async def body():
        guard = ConnectionGuard(HttpLimits(max_connections=4, evictions_per_s=10))
        conns = [_Conn() for _ in range(4)]
        for c in conns:
            assert guard.admit(c) and guard.accept_delay() == 0.0  # below the cap: no pacing
        with caplog.at_level(logging.WARNING, logger="egg_mcp.http"):
            assert guard.admit(_Conn())  # the oldest waiting one is closed to make room
            assert conns[0].aborted and guard.open == 4 and guard.stats["evicted"] == 1
            assert not guard.eviction_allowed()  # 10 per second: the next one in about 0.1 s
            time.sleep(0.12)
            assert guard.eviction_allowed()
            for _ in range(20):
                assert guard.admit(_Conn())
            assert guard.stats["evicted"] == 21
            assert not caplog.records, "no log line per closed connection"
            line = guard.log_summary(force=True)
        assert line is not None
        assert "21 connections still waiting for a request closed to make room" in line
        assert "cap 4 in total" in line and len(caplog.records) == 1
        assert guard.log_summary(force=True) is None  # nothing new: nothing logged

    asyncio.run(body())


def test_guard_paces_accepts_at_the_cap():
    guard = ConnectionGuard(HttpLimits(max_connections=1, accepts_at_cap_per_s=100))
    assert guard.accept_delay() == 0.0  # below the cap
    guard.open = 1
    delays = [guard.accept_delay() for _ in range(10)]
    assert delays.count(0.0) <= 5 and 0 < max(delays) <= 0.01 + 1e-3, delays  # a burst of 5, then 100/s


async def _until(condition, timeout_s: float = 30.0) -> None:
    """Until `condition()` holds or `timeout_s` passed, the event loop serving the sockets meanwhile; the caller
    asserts it. Not a set sleep: on a loaded host the loop gets there later, not differently."""
    import asyncio

    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


def test_acceptor_refuses_at_accept_when_full_and_paces_at_the_cap():
    """A connection that could only be refused is closed before a transport or protocol exists for it;
    at the cap, new connections with part of a head close waiting ones at `evictions_per_s` and the rest
    are shed at accept, while one that sends a whole request head is always taken."""
    import asyncio

    async def body():
        guard = ConnectionGuard(HttpLimits(max_connections=2, evictions_per_s=10, accept_batch=4))
        made: list = []

        class Proto(asyncio.Protocol):
            _egg_counted = False
            _egg_closing = False
            _egg_seen_data = False

            def connection_made(self, tr):
                self.transport, self._egg_client = tr, "c"
                made.append(self)
                guard.admit(self)

            def data_received(self, data):
                self._egg_seen_data = True

            def connection_lost(self, exc):
                guard.forget(self)

        lsock = tcp_listener("127.0.0.1", 0, 64)
        port = lsock.getsockname()[1]
        acceptor = Acceptor(lsock, Proto, guard, logging.getLogger("egg_mcp.http"))
        acceptor.start()
        loop = asyncio.get_running_loop()
        clients = []

        async def connect(send: bytes = b""):
            s = socket.socket()
            s.setblocking(False)
            await loop.sock_connect(s, ("127.0.0.1", port))
            if send:
                await loop.sock_sendall(s, send)
            clients.append(s)
            return s

        try:
            await connect()
            await connect()
            await _until(lambda: len(made) == 2 and guard.open == 2)
            assert len(made) == 2 and guard.open == 2
            third = await connect()  # both held ones are fresh and silent: nothing to evict
            await _until(lambda: guard.stats["refused"])
            assert guard.stats["refused"] == 1 and len(made) == 2, "refused at accept, no protocol made"
            assert await asyncio.wait_for(loop.sock_recv(third, 10), 5) == b""
            for c in made:  # now the held ones have sent something: evictable
                c._egg_seen_data = True
            t0 = time.monotonic()
            for _ in range(12):
                await connect(b"POST")
            await asyncio.sleep(0.5)  # at least: the pacing bound below is per elapsed second
            await _until(lambda: guard.stats["evicted"] >= 1 and guard.stats["shed"] >= 12 - guard.stats["evicted"] - 1)
            elapsed = time.monotonic() - t0
            assert guard.stats["evicted"] >= 1, guard.stats  # the cap makes room for new clients ...
            assert guard.stats["evicted"] <= 1 + 10 * elapsed + 2, (guard.stats, elapsed)  # ... at 10 per second
            assert guard.stats["shed"] >= 12 - guard.stats["evicted"] - 1, guard.stats  # the rest closed at accept
            taken = len(made)
            for _ in range(5):  # whole request heads: taken every time, paced or not
                await connect(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            await _until(lambda: len(made) == taken + 5)
            assert len(made) == taken + 5, (len(made), taken, guard.stats)
            for c in made:
                c._egg_seen_data = True
            guard._tokens = -10.0  # no closing allowed for a while: only whole heads get in
            late = await connect()  # nothing sent yet: parked, not shed
            await asyncio.sleep(0.2)
            await loop.sock_sendall(late, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            await _until(lambda: len(made) == taken + 6)
            assert len(made) == taken + 6, (len(made), taken, guard.stats)
        finally:
            acceptor.close()
            lsock.close()
            for s in clients:
                s.close()

    asyncio.run(body())


def test_closed_connections_are_not_left_to_the_cycle_collector():
    """asyncio's socket transport holds a bound method of itself; the guarded protocol cuts it when the
    connection is lost, so a closed connection (evicted at the cap, or closed by its client) is freed by
    reference counting and the server can run without CPython's automatic full collections."""
    import asyncio
    import gc

    import uvicorn

    async def app(scope, receive, send):  # never reached: the clients send half a request head
        raise AssertionError

    async def body():
        guard = ConnectionGuard(HttpLimits(max_connections=10))
        config = uvicorn.Config(app, http=guarded_protocol(guard), ws="none", lifespan="off", log_config=None)
        config.load()
        server = uvicorn.Server(config)
        lsock = tcp_listener("127.0.0.1", 0, 64)
        acceptor = Acceptor(lsock, lambda: config.http_protocol_class(  # (uvicorn types it as asyncio's)
            config=config, server_state=server.server_state, app_state={}),  # pyright: ignore[reportCallIssue]
            guard, logging.getLogger("egg_mcp.http"))
        acceptor.start()
        loop = asyncio.get_running_loop()
        clients = []
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for _ in range(30):
                s = socket.socket()
                s.setblocking(False)
                await loop.sock_connect(s, lsock.getsockname())
                await loop.sock_sendall(s, b"POST /mcp HTTP/1.1\r\nX-Slow: ")
                clients.append(s)
                await asyncio.sleep(0.02)
            await _until(lambda: guard.stats["evicted"] >= 10)
            for s in clients:
                s.close()
            await _until(lambda: guard.open == 0)
            assert guard.stats["evicted"] >= 10 and guard.open == 0, guard.stats
            gc.collect()
            left = [o for o in gc.garbage if type(o).__name__ in ("_SelectorSocketTransport", "socket")]
            assert not left, f"{len(left)} transports/sockets reachable only through reference cycles"
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            acceptor.close()
            lsock.close()

    asyncio.run(body())
