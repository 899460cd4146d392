"""How much of an LLM client's context one demo task costs: tools/list plus every tool call's traffic.

Runs the `egg-mcp demo` workflow (built-in softmax, CPU interpreter) in-process through `mcp.Client`,
records every tool call's arguments and result, and prints bytes and tokens. Tokens are bytes / 4
(no tokenizer is installed here; a tokenizer would give a similar figure for JSON and code).

What a client puts into the model's context differs: most send tools/list once and each result's
text content (some add structuredContent). So three figures are printed:
- tools/list: the catalogue every session carries before its first call;
- text: tools/list + call arguments + each result's text content blocks;
- wire: tools/list + call arguments + each whole result (text and structuredContent).

    python3 tools/measure_context.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _size(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode())


class RecordingClient:
    """Wraps an `mcp.Client`: forwards calls, keeps per-call byte counts."""

    def __init__(self, client):
        self._client = client
        self.calls: list[dict[str, Any]] = []

    async def call_tool(self, name: str, arguments: dict[str, Any], **kw):
        result = await self._client.call_tool(name, arguments, **kw)
        text = sum(len(c.text.encode()) for c in result.content if getattr(c, "type", "") == "text")
        whole = len(result.model_dump_json(by_alias=True, exclude_none=True).encode())
        self.calls.append({"tool": name, "args_bytes": _size(arguments), "text_bytes": text, "wire_bytes": whole})
        return result

    def __getattr__(self, name):
        return getattr(self._client, name)


async def measure(problem: str = "softmax") -> dict[str, Any]:
    from mcp import Client

    from egg_mcp.config import ServerConfig
    from egg_mcp.e2e.demo import drive
    from egg_mcp.server import create_server

    with tempfile.TemporaryDirectory() as ws:
        server = create_server(ServerConfig(workspace=Path(ws), force_interpreter=True))
        async with Client(server, read_timeout_seconds=900) as client:
            listed = await client.list_tools()
            tools_bytes = len(listed.model_dump_json(by_alias=True, exclude_none=True).encode())
            rec = RecordingClient(client)
            await drive(rec, problem, transport="in_process")
    args = sum(c["args_bytes"] for c in rec.calls)
    text = tools_bytes + args + sum(c["text_bytes"] for c in rec.calls)
    wire = tools_bytes + args + sum(c["wire_bytes"] for c in rec.calls)
    return {
        "problem": problem, "calls": len(rec.calls), "tools_list_bytes": tools_bytes,
        "text_bytes": text, "wire_bytes": wire,
        "tokens_bytes_over_4": {"tools_list": tools_bytes // 4, "text": text // 4, "wire": wire // 4},
        "max_text_bytes": max((c["text_bytes"] for c in rec.calls), default=0),
        "per_call": rec.calls,
    }


def main(argv: list[str] | None = None) -> int:
    import anyio

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", default="softmax", help="built-in demo problem (default: softmax)")
    parser.add_argument("--json", type=Path, help="also write the full measurement here")
    args = parser.parse_args(argv)
    out = anyio.run(measure, args.problem)
    t = out["tokens_bytes_over_4"]
    print(f"{out['calls']} tool calls; tools/list {out['tools_list_bytes']} B (~{t['tools_list']} tokens); "
          f"text {out['text_bytes']} B (~{t['text']} tokens); wire {out['wire_bytes']} B (~{t['wire']} tokens); "
          f"largest text block {out['max_text_bytes']} B")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
