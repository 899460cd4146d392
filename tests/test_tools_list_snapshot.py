"""The `tools/list` wire contract, held against a snapshot (tests/data/tools_list.json): a tool's name, its
description, its input and output schemas and its annotations. A change to what clients see must be deliberate:
regenerate the snapshot with `python3 -m tests.test_tools_list_snapshot` and review its diff with the change."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import anyio
from mcp import Client

from egg_mcp.config import ServerConfig
from egg_mcp.server import create_server

SNAPSHOT = Path(__file__).parent / "data" / "tools_list.json"


async def _tools_list(workspace: Path) -> list[dict]:
    async with Client(create_server(ServerConfig(workspace=workspace, force_interpreter=True))) as client:
        listed = await client.list_tools()
    return [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in listed.tools]


def _wire(workspace: Path) -> str:
    return json.dumps(anyio.run(_tools_list, workspace), indent=1, sort_keys=True) + "\n"


def test_tools_list_matches_the_snapshot(tmp_path):
    now = _wire(tmp_path / "ws")
    if now != SNAPSHOT.read_text():
        old, new = json.loads(SNAPSHOT.read_text()), json.loads(now)
        changed = sorted({t["name"] for t in old} ^ {t["name"] for t in new} |
                         {n["name"] for n in new for o in old if o["name"] == n["name"] and o != n})
        raise AssertionError(f"tools/list differs from {SNAPSHOT.name} for {changed}: if the change is meant, "
                             "regenerate it with `python3 -m tests.test_tools_list_snapshot` and commit the diff")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        SNAPSHOT.write_text(_wire(Path(tmp) / "ws"))
    print(f"wrote {SNAPSHOT}", file=sys.stderr)
