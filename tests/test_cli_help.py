"""Every CLI option a newcomer reads in --help says what it does."""

from __future__ import annotations

from egg_mcp.cli import build_parser
from egg_mcp.transport.auth import UNAUTHORIZED_BODY


def _help(*argv: str) -> str:
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices  # noqa: SLF001 - argparse keeps subparsers here
    return sub[argv[0]].format_help()  # pyright: ignore[reportIndexIssue]  # (typed any Iterable; subparsers': a dict)


def test_port_log_level_and_problem_have_help():
    serve = " ".join(_help("serve").split())
    assert "HTTP port with --http (default 8765)" in serve
    assert "server log level, logs go to stderr" in serve
    demo = " ".join(_help("demo").split())
    assert "built-in problem with shipped demo kernels" in demo


def test_log_level_is_checked():
    args = build_parser().parse_args(["serve", "--log-level", "debug"])
    assert args.log_level == "DEBUG"


def test_unauthorized_body_is_a_json_rpc_error_clients_show():
    import json

    body = json.loads(UNAUTHORIZED_BODY)
    assert body["error"]["message"].startswith("HTTP 401: missing or wrong bearer token")
