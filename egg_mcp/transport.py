"""stdio transport that answers malformed JSON-RPC instead of dropping it.

The SDK's stdio reader (mcp 2.3.0, `mcp/server/stdio.py`) hands a line it cannot validate to the
dispatcher as an exception, and the dispatcher only logs it at debug level
(`shared/jsonrpc_dispatcher.py`, `_dispatch`: "transport yielded exception"). A client that sent a
non-JSON line, truncated JSON, a lone surrogate (`"\\ud800"`), NaN, or `params` as an array waits
forever. Minimal reproducer against the SDK alone: start any MCPServer on stdio, initialize, send
`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":["x"]}` and read: no reply.

Here every line is checked before the SDK sees it; a bad one gets the JSON-RPC error the spec asks
for (-32700 parse error with id null, or -32600 invalid request with the request's id when it can
be read), written through the server's own write stream so replies never interleave.
HTTP needs nothing: the SDK's streamable-HTTP transport already answers 400 with a JSON-RPC error.
"""

from __future__ import annotations

import asyncio
import gc
import hmac
import io
import json
import logging
import os
import socket
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError


def error_for_line(line: str) -> JSONRPCError | None:
    """The JSON-RPC error reply for a line the SDK would drop, or None when the line is valid."""
    if not line.strip():
        return None
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except Exception as exc:  # pydantic ValidationError: bad JSON or not a JSON-RPC message
        detail = str(exc).splitlines()[0][:200]
    else:
        if not isinstance(message, types.JSONRPCNotification):
            return None
        # a request whose id is not a string or number validates as a notification (the extra "id"
        # is ignored) and would get no reply at all
        raw = json.loads(line)
        if not (isinstance(raw, dict) and "id" in raw):
            return None
        return JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(
            code=INVALID_REQUEST, message="Invalid request: id must be a string or a number"))
    try:
        raw: Any = json.loads(line)  # permissive: reads NaN and lone surrogates, so the id can be found
    except (ValueError, RecursionError):
        return JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(
            code=PARSE_ERROR, message="Parse error: the line is not valid JSON (one JSON-RPC message per line)"))
    req_id = raw.get("id") if isinstance(raw, dict) else None
    if isinstance(req_id, bool) or not isinstance(req_id, (str, int)):
        req_id = None
    why = detail
    if isinstance(raw, dict) and "params" in raw and not isinstance(raw["params"], dict):
        why = "params must be an object (named parameters), not " + type(raw["params"]).__name__
    elif "surrogate" in line or "\\ud" in line.lower():
        why = f"the message contains a lone surrogate or invalid value ({detail})"
    return JSONRPCError(jsonrpc="2.0", id=req_id, error=ErrorData(code=INVALID_REQUEST, message=f"Invalid request: {why}"))


class _CheckedLines:
    """An async line source for the SDK's stdio reader that replies to bad lines itself."""

    def __init__(self, raw) -> None:
        self.raw = raw
        self.write_stream = None
        self.ready = anyio.Event()

    def attach(self, write_stream) -> None:
        self.write_stream = write_stream
        self.ready.set()

    def __aiter__(self):
        return self._lines()

    async def _lines(self):
        async for line in self.raw:
            error = error_for_line(line)
            if error is None:
                if line.strip():
                    yield line
                continue
            await self.ready.wait()
            await self.write_stream.send(SessionMessage(error))  # type: ignore[union-attr]


async def run_stdio(mcp) -> None:
    """Serve `mcp` (an MCPServer) on stdin/stdout with malformed lines answered."""
    raw = anyio.wrap_file(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace"))
    lines = _CheckedLines(raw)
    async with stdio_server(stdin=lines) as (read_stream, write_stream):  # type: ignore[arg-type]
        lines.attach(write_stream)
        low = mcp._lowlevel_server  # what MCPServer.run_stdio_async drives, with our checked input
        await low.run(read_stream, write_stream, low.create_initialization_options())


MAX_BODY_BYTES = 16 * 2**20
"""Largest HTTP body buffered for the check (a 256 KiB source plus JSON escaping is far below)."""


class CheckedJsonRpcMiddleware:
    """HTTP: the SDK answers most malformed bodies with a JSON-RPC error already, but a request whose
    id is an object (or other non-id) is taken for a notification and gets `202` and no reply. This
    checks each POST body with the same rule as stdio and answers 400 with the JSON-RPC error."""

    def __init__(self, app, max_body_bytes: int = MAX_BODY_BYTES):
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        for key, value in scope.get("headers") or ():
            if key == b"content-length" and value.strip().isdigit() and int(value) > self.max_body_bytes:
                await _too_large(send, self.max_body_bytes)  # refused before a byte of the body is read
                return
        chunks, more, size = [], True, 0
        while more:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message], receive), send)
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.max_body_bytes:
                await _too_large(send, self.max_body_bytes)
                return
        body = b"".join(chunks)
        error = error_for_line(body.decode("utf-8", "replace")) if body.strip() else None
        if error is None:
            await self.app(scope, _replay([{"type": "http.request", "body": body, "more_body": False}], receive), send)
            return
        await _reply(send, 400, error)


async def _too_large(send, limit: int) -> None:
    await _reply(send, 413, JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(
        code=INVALID_REQUEST, message=f"Invalid request: body larger than {limit} bytes")), close=True)


async def _reply(send, status: int, error: JSONRPCError, close: bool = False) -> None:
    payload = error.model_dump_json(by_alias=True, exclude_none=False).encode()
    headers = [(b"content-type", b"application/json")] + ([(b"connection", b"close")] if close else [])
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def _replay(messages, receive):
    """The buffered body first, then the real channel (it reports the client's disconnect)."""
    pending = list(messages)

    async def replay():
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


# --------------------------------------------------------------------------------------------------
# Serving over HTTP: a bearer token on every request, and limits that hold under slow clients.
# --------------------------------------------------------------------------------------------------

MIN_TOKEN_CHARS = 16


def resolve_token(given: str | None) -> tuple[str, bool]:
    """The bearer token every HTTP request must carry: `given` ($EGG_MCP_TOKEN, or the deprecated
    --token), else a fresh 256-bit one. Returns (token, generated)."""
    import secrets

    if given:
        return given, False
    return secrets.token_urlsafe(32), True


def token_banner(token: str, generated: bool, url: str, uds: str | None = None) -> str:
    """What `serve --http` prints once on stderr: the token (only when generated here: a token taken
    from the environment is never echoed) and a ready client configuration."""
    shown = token if generated else "${EGG_MCP_TOKEN}"
    config = {"mcpServers": {"egg": {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {shown}"}}}}
    lines = ["egg-mcp: every HTTP request needs 'Authorization: Bearer <token>'."]
    if generated:
        lines.append(f"egg-mcp: generated token (shown once; set EGG_MCP_TOKEN to choose your own): {token}")
    else:
        lines.append("egg-mcp: token taken from $EGG_MCP_TOKEN (not shown).")
    if uds:
        lines.append(f"egg-mcp: listening on unix socket {uds} (mode 0600); e.g. "
                     f"curl --unix-socket {uds} -H 'Authorization: Bearer {shown}' {url}")
    else:
        lines += ["egg-mcp: MCP client config:", json.dumps(config),
                  "egg-mcp: MCP Inspector: npx @modelcontextprotocol/inspector --cli " + url
                  + f" --transport http --header 'Authorization: Bearer {shown}' --method tools/list",
                  "egg-mcp: tools/egg_client.py: EGG_MCP_TOKEN=... python tools/egg_client.py --url " + url
                  + " call list_tasks"]
    return "\n".join(lines) + "\n"


UNAUTHORIZED_BODY = (
    b'{"jsonrpc": "2.0", "id": null, "error": {"code": -32001, "message": "HTTP 401: missing or wrong bearer '
    b"token: send 'Authorization: Bearer <token>' with the server's token (EGG_MCP_TOKEN, or the one it "
    b'printed at start)"}}\n'
)


class BearerTokenMiddleware:
    """Rejects every HTTP request whose `Authorization: Bearer <token>` does not match, before any other
    layer sees it (the body is not read). The comparison is `hmac.compare_digest` (constant time)."""

    def __init__(self, app, token: str):
        if not token:
            raise ValueError("an HTTP server always needs a token")
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket"):
            supplied = b""
            for key, value in scope.get("headers") or ():
                if key.lower() == b"authorization":
                    supplied = value
                    break
            if not hmac.compare_digest(supplied, self.expected):
                # A JSON-RPC error body: MCP clients (the SDK's among them) show its message instead of
                # a bare "Server returned an error response".
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer"),
                                        (b"connection", b"close")]})
                await send({"type": "http.response.body", "body": UNAUTHORIZED_BODY})
                return
        await self.app(scope, receive, send)


@dataclass(frozen=True)
class HttpLimits:
    """What one HTTP server holds at most, and how long it waits for a client."""

    header_timeout_s: float = 10.0      # from connect (or the end of the last response) to a complete request head
    body_timeout_s: float = 30.0        # from the request head to the end of its body
    keep_alive_s: float = 5.0           # idle keep-alive connection
    max_connections: int | None = None  # open connections in total (None: the fd limit less a reserve)
    max_per_client: int | None = None   # from one client address (a unix socket is one client; None: the total)
    timeouts_per_s: int = 500           # header timeouts closed per second at most (no reconnect storm)
    max_body_bytes: int = 16 * 2**20    # request body
    max_header_bytes: int = 16 * 2**10  # request line + headers
    backlog: int = 4096                 # kernel accept queue (the kernel caps it at net.core.somaxconn)
    accept_batch: int = 64              # connections accepted per event-loop turn (see Acceptor)
    evictions_per_s: int = 250          # at the cap: new connections without a whole request head that may
                                        # close a waiting one, per second (accept, transport, protocol and
                                        # the closing: ~0.4 ms of CPU each here, from a py-spy profile)
    accepts_at_cap_per_s: int = 5000    # at the cap: accepts per second (one shed at accept builds nothing)
    log_every_s: float = 10.0           # the guard's closings are counted and summed up in one line this often
    full_gc_every_s: float = 60.0       # full garbage collections (see serve_http), from the sweeper


EVICT_GRACE_S = 0.5


class ConnectionGuard:
    """Connection accounting for the guarded HTTP protocol.

    A connection is *waiting* while it has not delivered a complete request head (just accepted, or idle
    after a response) and *busy* while a request runs. Waiting ones are closed after `header_timeout_s`
    however slowly they trickle bytes; a request whose body is not complete `body_timeout_s` after its
    head gets 408 and is closed. When a new connection would pass the per-client or the total cap, the
    oldest waiting connection (of that client, or of anyone) is closed to make room; only when every
    connection in the way is busy is the new one refused. So a flood of half-open connections can
    neither exhaust file descriptors nor lock out a client that sends a whole request at once."""

    def __init__(self, limits: HttpLimits, log: logging.Logger | None = None):
        total = limits.max_connections or default_max_connections()
        limits = replace(limits, max_connections=total, max_per_client=min(limits.max_per_client or total, total))
        self.limits = limits
        self.log = log or logging.getLogger("egg_mcp.http")
        self.waiting: OrderedDict = OrderedDict()          # proto -> monotonic time it started waiting
        self.waiting_by_client: dict = {}                  # client -> OrderedDict(proto -> None)
        self.busy: dict = {}                               # proto -> monotonic time its head arrived
        self.per_client: dict = {}                         # client -> open count
        self.open = 0
        self.stats = {"accepted": 0, "refused": 0, "evicted": 0, "shed": 0, "header_timeouts": 0, "body_timeouts": 0}
        self._logged = dict(self.stats)
        self._tokens, self._refilled = max(1.0, limits.evictions_per_s / 10), time.monotonic()
        self._accept_tokens, self._accept_refilled = max(1.0, limits.accepts_at_cap_per_s / 20), time.monotonic()
        self._last_full_gc = time.monotonic()
        self._last_log = time.monotonic()
        self._sweeper: asyncio.Task | None = None

    # state changes -------------------------------------------------------------------------------
    def _unwait(self, proto) -> None:
        if self.waiting.pop(proto, None) is not None:
            bucket = self.waiting_by_client.get(proto._egg_client)
            if bucket is not None:
                bucket.pop(proto, None)
                if not bucket:
                    del self.waiting_by_client[proto._egg_client]

    def _wait(self, proto) -> None:
        self.busy.pop(proto, None)
        self._unwait(proto)
        self.waiting[proto] = time.monotonic()
        self.waiting_by_client.setdefault(proto._egg_client, OrderedDict())[proto] = None

    def admit(self, proto) -> bool:
        """A new connection: True to keep it (after making room), False when it was refused."""
        self._ensure_sweeper()
        client = proto._egg_client
        lim = self.limits
        while self.per_client.get(client, 0) >= lim.max_per_client:
            if not self._evict(self.waiting_by_client.get(client)):
                return self._refuse(proto, f"client {client} already has {lim.max_per_client} busy connections")
        while self.open >= lim.max_connections:
            if not self._evict(self.waiting):
                return self._refuse(proto, f"{lim.max_connections} busy connections open")
        self.open += 1
        self.per_client[client] = self.per_client.get(client, 0) + 1
        proto._egg_counted = True
        self.stats["accepted"] += 1
        self._wait(proto)
        return True

    def head_received(self, proto) -> None:
        if proto._egg_counted:
            self._unwait(proto)
            self.busy[proto] = time.monotonic()

    def response_done(self, proto) -> None:
        if proto._egg_counted and not proto._egg_closing:
            self._wait(proto)

    def forget(self, proto) -> None:
        if not getattr(proto, "_egg_counted", False):
            return
        proto._egg_counted = False
        self._unwait(proto)
        self.busy.pop(proto, None)
        self.open -= 1
        client = proto._egg_client
        left = self.per_client.get(client, 1) - 1
        if left:
            self.per_client[client] = left
        else:
            self.per_client.pop(client, None)

    # closing ---------------------------------------------------------------------------------------
    def _refuse(self, proto, why: str) -> bool:
        self.stats["refused"] += 1
        self._last_refusal = why
        proto._egg_closing = True
        proto.transport.abort()
        return False

    def _evict(self, bucket) -> bool:
        """Close the oldest waiting connection of `bucket`, unless even that one arrived within
        EVICT_GRACE_S and sent nothing yet (its request head may be unread in the socket buffer while
        the loop accepts a burst: a client that sends its head at once is never the one closed)."""
        if not self._evictable(bucket):
            return False
        proto = next(iter(bucket))
        self.stats["evicted"] += 1
        self._tokens -= 1.0
        self._close(proto)
        return True

    def _close(self, proto) -> None:
        proto._egg_closing = True
        self.forget(proto)  # counted out now: the transport reports connection_lost on a later turn
        proto.transport.abort()

    def sweep(self) -> None:
        now = time.monotonic()
        lim = self.limits
        budget = max(1, int(lim.timeouts_per_s * self._sweep_period()))
        while self.waiting and budget > 0:
            budget -= 1
            proto, since = next(iter(self.waiting.items()))
            if now - since < lim.header_timeout_s:
                break
            self.stats["header_timeouts"] += 1
            self._close(proto)
        for proto, since in list(self.busy.items()):
            if now - since >= lim.body_timeout_s and proto._egg_body_pending():
                self.stats["body_timeouts"] += 1
                proto._egg_closing = True
                self.forget(proto)
                proto._egg_timeout_body()

    def at_cap(self) -> bool:
        return self.open >= self.limits.max_connections

    def eviction_allowed(self) -> bool:
        """At the cap, whether a new connection without a whole request head may close a waiting one now:
        those closings are paced at `evictions_per_s` (a flood larger than the cap, each new connection
        closing an old one that reconnects at once, would otherwise keep the server busy with nothing else)."""
        rate = float(self.limits.evictions_per_s)
        now = time.monotonic()
        self._tokens = min(max(1.0, rate / 10), self._tokens + (now - self._refilled) * rate)
        self._refilled = now
        return self._tokens >= 1.0

    def accept_delay(self) -> float:
        """Seconds to leave the listening socket alone before the next accept: 0 below the cap; at the cap,
        accepts are paced at `accepts_at_cap_per_s` (a connection shed at accept reconnects at once: unpaced,
        that loop alone would take the CPU; paced, the rest waits in the kernel's queue, nothing dropped)."""
        if not self.at_cap():
            return 0.0
        rate = float(self.limits.accepts_at_cap_per_s)
        now = time.monotonic()
        self._accept_tokens = min(max(1.0, rate / 20), self._accept_tokens + (now - self._accept_refilled) * rate)
        self._accept_refilled = now
        if self._accept_tokens >= 1.0:
            self._accept_tokens -= 1.0
            return 0.0
        return (1.0 - self._accept_tokens) / rate

    def full(self) -> bool:
        """At the cap with no waiting connection old enough to close: a new one would be refused."""
        return self.open >= self.limits.max_connections and not self._evictable(self.waiting)

    def _evictable(self, bucket) -> bool:
        if not bucket:
            return False
        proto = next(iter(bucket))
        return proto._egg_seen_data or time.monotonic() - self.waiting.get(proto, 0.0) >= EVICT_GRACE_S

    def log_summary(self, force: bool = False) -> str | None:
        """One warning line for everything the guard closed or refused since the last one, at most every
        `log_every_s` (a per-connection line costs more CPU than the closing itself under a flood, even when
        a log filter drops it: 5 % of the server's CPU under the flood in a py-spy profile)."""
        now = time.monotonic()
        if not force and now - self._last_log < self.limits.log_every_s:
            return None
        delta = {k: v - self._logged[k] for k, v in self.stats.items() if k != "accepted"}
        window = now - self._last_log
        self._logged, self._last_log = dict(self.stats), now
        if not any(delta.values()):
            return None
        lim = self.limits
        parts = []
        if delta["evicted"]:
            parts.append(f"{delta['evicted']} connections still waiting for a request closed to make room "
                         f"(cap {lim.max_connections} in total, {lim.max_per_client} per client)")
        if delta["header_timeouts"]:
            parts.append(f"{delta['header_timeouts']} closed without a complete request head within "
                         f"{lim.header_timeout_s:g} s")
        if delta["body_timeouts"]:
            parts.append(f"{delta['body_timeouts']} requests answered 408 (body not complete within "
                         f"{lim.body_timeout_s:g} s)")
        if delta["shed"]:
            parts.append(f"{delta['shed']} new connections without a whole request head closed at accept "
                         f"(cap reached, closings of waiting ones paced at {lim.evictions_per_s}/s)")
        if delta["refused"]:
            parts.append(f"{delta['refused']} connections refused ({getattr(self, '_last_refusal', '')})")
        line = f"HTTP limits in the last {window:.0f} s: " + "; ".join(parts) + f"; {self.open} open now"
        self.log.warning("%s", line)
        return line

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    def _sweep_period(self) -> float:
        return max(0.05, min(0.25, self.limits.header_timeout_s / 4, self.limits.body_timeout_s / 4))

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self._sweep_period())
            try:
                self.sweep()
                self.log_summary()
                if time.monotonic() - self._last_full_gc >= self.limits.full_gc_every_s:
                    self._last_full_gc = time.monotonic()
                    gc.collect()
            except Exception:  # pragma: no cover - keep guarding whatever one connection did
                self.log.exception("HTTP connection sweep failed")


class Acceptor:
    """Accepts on the listening socket for uvicorn, in place of asyncio's own loop (which takes up to
    `backlog` connections, 2048 here, in one event-loop turn and has no way to pause): at most
    `accept_batch` per turn, so requests in progress advance between batches. Below the cap every
    connection is taken. At the cap (a flood holds it), accepts are paced (`accept_delay`) and each new
    connection is looked at before anything is built for it (MSG_PEEK, nothing consumed):
      - a whole request head is there: taken (it closes the oldest waiting connection): a client that
        sends its request at once is served however many slow ones hold the cap;
      - part of a head: taken only when a closing is allowed (`eviction_allowed`), else closed at once;
      - nothing yet: parked (at most `accept_batch`, for up to PARK_S) until its first bytes say which;
      - a connection that could only be refused (cap reached, nothing evictable) is closed at once."""

    PARK_S = 0.5

    def __init__(self, sock: socket.socket, factory, guard: ConnectionGuard, log: logging.Logger):
        self.sock, self.factory, self.guard, self.log = sock, factory, guard, log
        self.loop = asyncio.get_running_loop()
        self.fd = sock.fileno()
        self.reading = False
        self.resume: asyncio.TimerHandle | None = None
        self.closed = False
        self.resource_errors = 0
        self.parked: OrderedDict = OrderedDict()  # socket -> deadline
        self.recheck: asyncio.TimerHandle | None = None
        self.peek_bytes = guard.limits.max_header_bytes
        sock.setblocking(False)

    def start(self) -> None:
        if not self.reading and not self.closed:
            self.resume = None
            self.loop.add_reader(self.fd, self._ready)
            self.reading = True

    def _pause(self, seconds: float) -> None:
        if self.reading:
            self.loop.remove_reader(self.fd)
            self.reading = False
        if self.resume is None and not self.closed:
            self.resume = self.loop.call_later(seconds, self.start)

    def close(self) -> None:
        self.closed = True
        if self.reading:
            self.loop.remove_reader(self.fd)
            self.reading = False
        for handle in (self.resume, self.recheck):
            if handle is not None:
                handle.cancel()
        self.resume = self.recheck = None
        for conn in list(self.parked):
            self._unpark(conn)
            conn.close()

    def _head(self, conn: socket.socket) -> str:
        try:
            data = conn.recv(self.peek_bytes, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return "nothing"
        except OSError:
            return "gone"
        if not data:
            return "gone"
        return "whole" if b"\r\n\r\n" in data else "part"

    def _shed(self, conn: socket.socket) -> None:
        self.guard.stats["shed"] += 1
        conn.close()

    def _park(self, conn: socket.socket) -> None:
        """Hold a connection that has sent nothing yet until its first bytes arrive (a reader on it), for
        PARK_S at most; when `accept_batch` are parked already the oldest one is shed."""
        if len(self.parked) >= self.guard.limits.accept_batch:
            oldest = next(iter(self.parked))
            self._unpark(oldest)
            self._shed(oldest)
        self.parked[conn] = time.monotonic() + self.PARK_S
        self.loop.add_reader(conn.fileno(), self._parked_ready, conn)
        if self.recheck is None:
            self.recheck = self.loop.call_later(self.PARK_S / 5, self._expire_parked)

    def _unpark(self, conn: socket.socket) -> None:
        if self.parked.pop(conn, None) is not None:
            self.loop.remove_reader(conn.fileno())

    def _parked_ready(self, conn: socket.socket) -> None:
        self._unpark(conn)
        head = self._head(conn)
        if head == "whole" or not self.guard.at_cap() or (head == "part" and self.guard.eviction_allowed()):
            self._take(conn)
        else:
            self._shed(conn)

    def _expire_parked(self) -> None:
        self.recheck = None
        now = time.monotonic()
        for conn, deadline in list(self.parked.items()):
            if now < deadline:
                break  # in arrival order: the rest are younger
            self._unpark(conn)
            self._shed(conn)
        if self.parked and not self.closed:
            self.recheck = self.loop.call_later(self.PARK_S / 5, self._expire_parked)

    def _ready(self) -> None:
        guard = self.guard
        for _ in range(guard.limits.accept_batch):
            delay = guard.accept_delay()
            if delay > 0:
                self._pause(max(delay, 0.002))
                return
            try:
                conn, addr = self.sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:  # out of descriptors or memory: leave the queue to the kernel a moment
                self.resource_errors += 1
                if self.resource_errors == 1 or self.resource_errors % 1000 == 0:
                    self.log.warning("HTTP accept failed (%s), %d times so far: pausing accepts 0.1 s",
                                     exc, self.resource_errors)
                self._pause(0.1)
                return
            conn.setblocking(False)
            if guard.full():
                guard.stats["refused"] += 1
                guard._last_refusal = f"{guard.limits.max_connections} busy connections open"
                conn.close()
                continue
            if guard.at_cap() and not guard.eviction_allowed():
                head = self._head(conn)
                if head == "nothing":
                    self._park(conn)
                    continue
                if head != "whole":
                    self._shed(conn)
                    continue
            self._take(conn)

    def _take(self, conn: socket.socket) -> None:
        self.loop.create_task(self._connect(conn))

    async def _connect(self, conn: socket.socket) -> None:
        try:
            await self.loop.connect_accepted_socket(self.factory, conn)
        except OSError:
            conn.close()


def guarded_protocol(guard: ConnectionGuard):
    """uvicorn's h11 protocol with the guard's accounting (header/body timeouts, connection caps)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        _egg_counted = False
        _egg_closing = False
        _egg_client = None
        _egg_seen_data = False

        def data_received(self, data):
            self._egg_seen_data = True
            super().data_received(data)

        def connection_made(self, transport):  # type: ignore[override]
            super().connection_made(transport)
            self._egg_client = self.client[0] if self.client else "local"
            guard.admit(self)

        def connection_lost(self, exc):
            guard.forget(self)
            super().connection_lost(exc)
            # asyncio's socket transport keeps a bound method of itself (`_read_ready_cb`, CPython 3.11):
            # a reference cycle, so every closed connection stayed in memory until a full garbage
            # collection. Cut, it is freed at once.
            if getattr(self.transport, "_read_ready_cb", None) is not None:
                self.transport._read_ready_cb = None

        def handle_events(self):
            before = self.cycle
            super().handle_events()
            if self.cycle is not before and self.cycle is not None and not self.cycle.response_complete:
                guard.head_received(self)

        def on_response_complete(self):
            super().on_response_complete()
            if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
                guard.response_done(self)

        def _egg_body_pending(self) -> bool:
            cycle = self.cycle
            return cycle is not None and not cycle.response_complete and cycle.more_body

        def _egg_timeout_body(self) -> None:
            cycle = self.cycle
            if cycle is not None and not cycle.response_started:
                self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\n"
                                     b"content-length: 30\r\nconnection: close\r\n\r\nrequest body not sent in time\n")
            self.transport.close()

    return GuardedH11Protocol


class RateLimitedLogFilter(logging.Filter):
    """At most `burst` records per (logger, message template) and then one per `per_s` seconds; the
    next record that passes says how many like it were dropped. Bounds the log under a flood of bad
    requests (a few KB per minute per kind of message instead of one line per request)."""

    def __init__(self, burst: int = 10, per_s: float = 10.0, clock=time.monotonic):
        super().__init__()
        self.burst, self.per_s, self.clock = burst, per_s, clock
        self.state: dict = {}  # key -> [tokens, last refill, dropped]

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, str(record.msg)[:200])
        now = self.clock()
        st = self.state.get(key)
        if st is None:
            if len(self.state) > 10_000:
                self.state.clear()
            st = self.state[key] = [float(self.burst), now, 0]
        st[0] = min(float(self.burst), st[0] + (now - st[1]) / self.per_s)
        st[1] = now
        if st[0] < 1.0:
            st[2] += 1
            return False
        st[0] -= 1.0
        if st[2]:
            record.msg = f"{record.msg} [{st[2]} similar messages suppressed]"
            st[2] = 0
        return True


def install_log_rate_limit(logger: logging.Logger | None = None, **kw) -> RateLimitedLogFilter:
    """Put one rate limit on every handler of `logger` (default: the root logger, where the server's,
    uvicorn's and the SDK's records all end up)."""
    flt = RateLimitedLogFilter(**kw)
    for handler in (logger or logging.getLogger()).handlers:
        handler.addFilter(flt)
    return flt


def unix_listener(path: str, backlog: int) -> socket.socket:
    """A unix stream socket at `path` created with mode 0600 (umask while binding: no window in which
    another user could connect)."""
    import stat as _stat

    if os.path.exists(path):
        if not _stat.S_ISSOCK(os.stat(path).st_mode):
            raise OSError(f"{path} exists and is not a socket")
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(backlog)
    return sock


def tcp_listener(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    return sock


FD_RESERVE = 256
"""File descriptors kept for everything but client connections (workspace, workers, pipes)."""


def default_max_connections() -> int:
    import resource

    return max(64, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - FD_RESERVE)


def raise_fd_limit() -> int:
    """Soft RLIMIT_NOFILE up to the hard limit (held connections are file descriptors)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 20)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            return soft
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _somaxconn() -> int | None:
    try:
        with open("/proc/sys/net/core/somaxconn") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def limits_banner(guard: ConnectionGuard, fd_before: tuple[int, int], fd_soft: int) -> str:
    """The line `serve --http` logs at start: what it holds at most and how long it waits."""
    lim = guard.limits
    cap = _somaxconn()
    backlog = f"{min(lim.backlog, cap)} (asked {lim.backlog}, net.core.somaxconn {cap})" if cap else f"{lim.backlog}"
    raised = f"raised from soft {fd_before[0]}" if fd_soft > fd_before[0] else "soft limit, not raised"
    return (f"HTTP limits: file descriptors {fd_soft} ({raised}; hard {fd_before[1]}); connections "
            f"{lim.max_connections} in total, {lim.max_per_client} per client; request head within "
            f"{lim.header_timeout_s:g} s, body within {lim.body_timeout_s:g} s; body <= {lim.max_body_bytes} B; "
            f"listen backlog {backlog}; {lim.accept_batch} accepts per event-loop turn; at the cap "
            f"{lim.accepts_at_cap_per_s} accepts/s, a whole request head always taken, "
            f"{lim.evictions_per_s}/s waiting connections closed for new ones without")


def serve_http(app, sock: socket.socket, limits: HttpLimits) -> None:
    """Run `app` on the listening socket `sock` with the guarded protocol and `limits`.

    asyncio accepts up to `backlog` connections per turn of the event loop (the number uvicorn hands to
    `loop.create_server` serves both as the listen queue and as that batch). Under a connection flood a
    batch of 2048 accepts, each with its transport, protocol and the closing of an older connection, made
    one loop turn take most of a second, and an authenticated request needs a few dozen turns: seconds. So
    the `Acceptor` takes the socket instead: `accept_batch` per turn (requests in progress advance between
    batches), paced at the cap, while the kernel queue keeps its full `backlog` (a burst of connects waits
    there instead of being dropped, which would cost the client a SYN retransmit: 1 s, then 3 s, 7 s)."""
    import resource

    import uvicorn

    fd_before = resource.getrlimit(resource.RLIMIT_NOFILE)
    fd_soft = raise_fd_limit()
    guard = ConnectionGuard(limits)
    logging.getLogger("egg_mcp.http").info("%s", limits_banner(guard, fd_before, fd_soft))
    config = uvicorn.Config(
        app, http=guarded_protocol(guard), ws="none", lifespan="auto", log_config=None, access_log=False,
        log_level="warning", timeout_keep_alive=max(1, int(limits.keep_alive_s)), backlog=limits.backlog,
        h11_max_incomplete_event_size=limits.max_header_bytes)

    class Server(uvicorn.Server):
        acceptor: Acceptor | None = None

        async def startup(self, sockets=None):
            await super().startup(sockets=[])  # uvicorn's own listeners: none, the Acceptor takes `sock`
            if self.should_exit:
                return

            def factory():
                return config.http_protocol_class(config=config, server_state=self.server_state,
                                                  app_state=self.lifespan.state)

            self.acceptor = Acceptor(sock, factory, guard, logging.getLogger("egg_mcp.http"))
            self.acceptor.start()

        async def shutdown(self, sockets=None):
            if self.acceptor is not None:
                self.acceptor.close()
            sock.close()
            await super().shutdown(sockets=[])

    # Garbage collection: a full collection goes through every live object and stops the loop meanwhile;
    # 20,000 held connections are about 400,000 objects (passes of 0.6-1.3 s measured on the shared 2-core
    # machine), and CPython starts one whenever a quarter more objects have survived since the last: 14
    # in 30 s under the flood, each finding nothing once closed connections are freed by reference
    # counting (see connection_lost). So what exists
    # now (the app, its schemas, the SDK: about 100,000 objects) is frozen out of every collection, the
    # automatic full collections are off, and the sweeper runs one every `full_gc_every_s` (young
    # garbage, where request-scoped cycles are, is still collected by the generation 0 and 1 passes).
    gc.collect()
    gc.freeze()
    gc.set_threshold(*gc.get_threshold()[:2], 2**31 - 1)
    Server(config).run(sockets=[])
