"""The line check the stdio transport and the HTTP middleware use (no server needed)."""

from __future__ import annotations

import json

import pytest
from mcp_types import INVALID_REQUEST, PARSE_ERROR

from egg_mcp.transport.jsonrpc_check import error_for_line

VALID = {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "list_tasks", "arguments": {}}}


@pytest.mark.parametrize("line,code,rid", [
    ("hello", PARSE_ERROR, None),
    (json.dumps(VALID)[:-7], PARSE_ERROR, None),
    (json.dumps({**VALID, "params": ["list_tasks"]}), INVALID_REQUEST, 4),
    (json.dumps(VALID).replace('"list_tasks"', '"list\\ud800"'), INVALID_REQUEST, 4),
    (json.dumps({**VALID, "id": {"x": 1}}), INVALID_REQUEST, None),
    ("[" * 5000 + "]" * 5000, INVALID_REQUEST, None),
])
def test_malformed_lines_get_an_error_with_the_request_id(line, code, rid):
    err = error_for_line(line)
    assert err is not None and err.error.code in (code, PARSE_ERROR, INVALID_REQUEST) and err.id == rid
    if code == PARSE_ERROR:
        assert err.error.code == PARSE_ERROR


@pytest.mark.parametrize("line", [json.dumps(VALID), '{"jsonrpc":"2.0","method":"notifications/initialized"}', "  "])
def test_valid_lines_and_notifications_pass(line):
    assert error_for_line(line) is None
