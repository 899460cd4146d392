"""The JSON-RPC check shared by both transports: the error reply for a message the SDK would drop, and the
HTTP middleware that applies it to each POST body."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
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
    return JSONRPCError(jsonrpc="2.0", id=req_id, error=ErrorData(code=INVALID_REQUEST, message="Invalid request: "
                                                                  f"{why}"))


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
