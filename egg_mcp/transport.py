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

import io
import json
import sys
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

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
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
            if size > MAX_BODY_BYTES:
                await _reply(send, 413, JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(
                    code=INVALID_REQUEST, message=f"Invalid request: body larger than {MAX_BODY_BYTES} bytes")))
                return
        body = b"".join(chunks)
        error = error_for_line(body.decode("utf-8", "replace")) if body.strip() else None
        if error is None:
            await self.app(scope, _replay([{"type": "http.request", "body": body, "more_body": False}], receive), send)
            return
        await _reply(send, 400, error)


async def _reply(send, status: int, error: JSONRPCError) -> None:
    payload = error.model_dump_json(by_alias=True, exclude_none=False).encode()
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": payload})


def _replay(messages, receive):
    """The buffered body first, then the real channel (it reports the client's disconnect)."""
    pending = list(messages)

    async def replay():
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
