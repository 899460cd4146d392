#!/usr/bin/env python3
"""A scripted MCP client for egg-mcp (or any MCP server): for shell scripts, CI, and agents that only
have a shell. It needs only the `mcp` package, not egg_mcp.

Connect to a server it starts over stdio, or to one already serving streamable HTTP:

    egg_client.py --stdio "egg-mcp serve --interpreter" tools
    egg_client.py --url http://127.0.0.1:8765/mcp --token "$EGG_MCP_TOKEN" call list_tasks
    egg_client.py --stdio "python -m egg_mcp serve" call start_task '{"reference": "softmax"}'
    egg_client.py --stdio "..." call verify '{"task_id": "t-...", "source": "@kernel.py"}'

A string argument "@path" is replaced by the text of that file ("@@..." passes a literal "@...").
Commands: tools | prompts | resources | read URI | prompt NAME [JSON] | call TOOL [JSON].
Output: the structured result as JSON on stdout (listings use the protocol's camelCase names). Exit 1 on a tool error (message on stderr), 2 on a
usage or connection error.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any


class UsageError(Exception):
    """Bad command line or arguments (exit 2)."""


def expand_file_args(value: Any, base: Path | None = None) -> Any:
    """Replace string arguments "@path" by the file's text, recursively ("@@x" -> "@x")."""
    if isinstance(value, dict):
        return {k: expand_file_args(v, base) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_file_args(v, base) for v in value]
    if isinstance(value, str) and value.startswith("@"):
        if value.startswith("@@"):
            return value[1:]
        path = Path(value[1:]).expanduser()
        if base is not None and not path.is_absolute():
            path = base / path
        try:
            return path.read_text()
        except OSError as exc:
            raise UsageError(f"cannot read {path} for argument {value!r}: {exc.strerror}") from None
    return value


def parse_json_args(text: str | None) -> dict[str, Any]:
    if text is None or not text.strip():
        return {}
    if text == "-":
        text = sys.stdin.read()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"arguments are not valid JSON ({exc.msg} at column {exc.colno}): {text[:80]!r}; "
                         "pass an object like '{\"task_id\": \"t-...\"}'") from None
    if not isinstance(value, dict):
        raise UsageError("arguments must be a JSON object, e.g. '{\"reference\": \"softmax\"}'")
    return value


def _dump(model: Any) -> Any:
    if hasattr(model, "model_dump"):
        return model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return model


def tool_payload(result: Any) -> Any:
    """The structured result of a tool call; the text contents when the tool has no output schema."""
    if result.structured_content is not None:
        return result.structured_content
    texts = [getattr(c, "text", None) for c in result.content]
    texts = [t for t in texts if t is not None]
    if len(texts) == 1:
        try:
            return json.loads(texts[0])
        except json.JSONDecodeError:
            return {"text": texts[0]}
    return {"content": [_dump(c) for c in result.content]}


def error_text(result: Any) -> str:
    return "\n".join(getattr(c, "text", str(c)) for c in result.content) or "tool error (no message)"


def build_target(args: argparse.Namespace):
    """What `mcp.Client` connects to: stdio parameters, or an HTTP transport (with the bearer token)."""
    from mcp import StdioServerParameters

    if bool(args.stdio) == bool(args.url):
        raise UsageError("pass exactly one of --stdio 'COMMAND' or --url http://HOST:PORT/mcp")
    if args.stdio:
        argv = shlex.split(args.stdio)
        if not argv:
            raise UsageError("--stdio needs a command, e.g. --stdio 'egg-mcp serve'")
        return StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ), cwd=os.getcwd()), None
    token = args.token or os.environ.get("EGG_MCP_TOKEN")
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    headers = {"authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(args.timeout, read=args.timeout),
                              event_hooks={"response": [_keep_http_error]})
    return streamable_http_client(args.url, http_client=http), http


HTTP_ERRORS: list[str] = []
"""'HTTP <status>: <body>' of every error response: the SDK reports only 'Server returned an error
response' for them, so main() prints these (a 401 says which token header is missing)."""


async def _keep_http_error(response) -> None:
    if response.status_code >= 400:
        body = (await response.aread()).decode(errors="replace").strip()
        HTTP_ERRORS.append(f"HTTP {response.status_code}: {body[:500] or response.reason_phrase}")


async def run(args: argparse.Namespace) -> tuple[int, Any]:
    from mcp import Client

    target, http = build_target(args)
    try:
        async with Client(target, read_timeout_seconds=args.timeout) as client:
            return await dispatch(client, args)
    finally:
        if http is not None:
            await http.aclose()


async def dispatch(client, args: argparse.Namespace) -> tuple[int, Any]:
    cmd = args.command
    if cmd == "tools":
        tools = (await client.list_tools()).tools
        return 0, {"tools": [_dump(t) for t in tools]}
    if cmd == "prompts":
        return 0, {"prompts": [_dump(p) for p in (await client.list_prompts()).prompts]}
    if cmd == "resources":
        resources = (await client.list_resources()).resources
        templates = (await client.list_resource_templates()).resource_templates
        return 0, {"resources": [_dump(r) for r in resources], "resource_templates": [_dump(t) for t in templates]}
    if cmd == "read":
        result = await client.read_resource(args.uri)
        return 0, {"contents": [_dump(c) for c in result.contents]}
    if cmd == "prompt":
        result = await client.get_prompt(args.name, {k: str(v) for k, v in args.parsed_arguments.items()})
        return 0, _dump(result)
    if cmd == "call":
        result = await client.call_tool(args.tool, args.parsed_arguments)
        if result.is_error:
            return 1, error_text(result)
        return 0, tool_payload(result)
    raise UsageError(f"unknown command {cmd!r}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="egg_client.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("--stdio", metavar="COMMAND", help="start this server command and talk over its stdin/stdout")
    p.add_argument("--url", help="streamable-HTTP endpoint, e.g. http://127.0.0.1:8765/mcp")
    p.add_argument("--token", help="bearer token for --url (default: $EGG_MCP_TOKEN)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for one call (default 900)")
    p.add_argument("--compact", action="store_true", help="one-line JSON")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("tools", help="list tools with their schemas")
    sub.add_parser("prompts", help="list prompts")
    sub.add_parser("resources", help="list resources and resource templates")
    read = sub.add_parser("read", help="read a resource")
    read.add_argument("uri")
    prompt = sub.add_parser("prompt", help="render a prompt")
    prompt.add_argument("name")
    prompt.add_argument("arguments", nargs="?", help="JSON object of prompt arguments")
    call = sub.add_parser("call", help="call a tool")
    call.add_argument("tool")
    call.add_argument("arguments", nargs="?", help="JSON object of tool arguments ('-' reads stdin); "
                      "a string \"@path\" is replaced by that file's text")
    return p


def main(argv: list[str] | None = None) -> int:
    import anyio

    args = build_parser().parse_args(argv)
    try:
        # read and check the arguments before starting a server
        args.parsed_arguments = expand_file_args(parse_json_args(getattr(args, "arguments", None)))
        code, payload = anyio.run(run, args)
    except UsageError as exc:
        print(f"egg_client: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # connection refused, server exited, protocol errors
        msg = str(exc) or type(exc).__name__
        if isinstance(exc, BaseExceptionGroup):  # noqa: F821 - anyio task groups wrap the cause
            leaves = _leaves(exc)
            msg = "; ".join(f"{type(e).__name__}: {e}" for e in leaves) or msg
        print(f"egg_client: could not talk to the server: {msg}", file=sys.stderr)
        for line in dict.fromkeys(HTTP_ERRORS):
            if line.split(":")[0] not in msg:  # the server's own error text already reached msg
                print(f"egg_client: {line}", file=sys.stderr)
        return 2
    if code != 0:
        print(payload, file=sys.stderr)
        for line in dict.fromkeys(HTTP_ERRORS):
            print(f"egg_client: {line}", file=sys.stderr)
        return code
    print(json.dumps(payload, indent=None if args.compact else 2, default=str))
    return 0


def _leaves(group: BaseException) -> list[BaseException]:
    subs = getattr(group, "exceptions", None)
    if not subs:
        return [group]
    out: list[BaseException] = []
    for e in subs:
        out.extend(_leaves(e))
    return out


if __name__ == "__main__":
    sys.exit(main())
