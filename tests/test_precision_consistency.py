"""The precision advice is one rule everywhere (issue 30's small items): a problem without dots gets no dot
precision rule, and on the CPU start_task's brief names the same compute path as generate_seeds' brief."""

from __future__ import annotations

import re

import anyio
from mcp import Client

from egg_mcp.config import ServerConfig
from egg_mcp.server import create_server
from tests.mcp_driver import call


def _briefs(tmp_path, reference):
    async def main():
        async with Client(create_server(ServerConfig(workspace=tmp_path / "ws", force_interpreter=True))) as client:
            started = await call(client, "start_task", reference=reference)
            seeds = await call(client, "generate_seeds", task_id=started["task_id"])
            return started["brief"], seeds["brief"]

    return anyio.run(main)


def test_a_problem_without_dots_gets_no_dot_rule(tmp_path):
    start, seeds = _briefs(tmp_path, "softmax")
    for brief in (start, seeds):
        assert "input_precision" not in brief and "tl.dot(" not in brief.split("## Contract")[0], brief
        assert "no dots in this problem" in brief


def test_start_task_and_generate_seeds_name_the_same_path(tmp_path):
    start, seeds = _briefs(tmp_path, "gemm_bias_relu")
    path = re.search(r"fastest admissible compute path for dots is (\w+)", seeds).group(1)
    line = next(line for line in start.splitlines() if "Precision" in line)
    said = {"tf32x3": "3xTF32", "fp32": '"ieee"', "tf32": "TF32", "fp16x3": "fp16x3", "bf16x3": "bf16x3"}[path]
    assert said in line, (path, line)
    if path != "fp32":
        assert '"ieee"' not in line, line
