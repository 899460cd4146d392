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
import sys

import anyio
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from egg_mcp.transport.jsonrpc_check import error_for_line


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
