"""Strict arguments (issue 28 item 7): the type table and the size_overrides footprint check.

For every tool and every numeric or boolean argument (read from the published schemas, so a new one is
covered or this test fails), bools, numeric strings, NaN/inf, out-of-range and huge values are refused in
one plain sentence naming the argument and what it takes, before anything runs; valid values pass. Every
tool that takes size_overrides refuses an oversize one by start_task's footprint check before any job
starts (in-process MCP client, fake evaluator, CPU)."""

from __future__ import annotations

import json
import math
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver.exceptions import ToolError

from egg_mcp.config import ServerConfig
from egg_mcp.contract import JobOutcome
from egg_mcp.server import create_server
from egg_mcp.surface.schemas import check_arguments
from egg_mcp.workflow import limits
from tests.mcp_driver import SEEDS, call, call_error
from tests.workspace_fakes import FakeEvaluator

TID, CID = "t-00000000", "c-00000001"
BASE_ARGS: dict[str, dict[str, Any]] = {
    "start_task": {"reference": "softmax"},
    "verify": {"task_id": TID, "source": "x"},
    "profile_ncu": {"task_id": TID, "candidate_id": CID},
    "propose_tiling": {"task_id": TID, "candidate_id": CID},
    "compare": {"task_id": TID, "candidate_a": CID, "candidate_b": "c-00000002"},
    "commit_stage": {"task_id": TID, "candidate_id": CID, "decision": {"summary": "s"}},
}
# every numeric, boolean or size-map argument of the catalogue, and its kind
TABLE = {
    ("start_task", "k_seeds"): "integer", ("start_task", "atol"): "number", ("start_task", "rtol"): "number",
    ("start_task", "size_overrides"): "size_lists", ("verify", "size_overrides"): "size_lists",
    ("profile_ncu", "size_overrides"): "size_lists", ("profile_ncu", "detail"): "boolean",
    ("propose_tiling", "max_trials"): "integer", ("propose_tiling", "time_budget_s"): "number",
    ("propose_tiling", "dims"): "sizes", ("propose_tiling", "measure"): "boolean",
    ("compare", "rounds"): "integer", ("commit_stage", "force"): "boolean",
}
LEAKS = ("pydantic", "validation error", "For further information", "input_type", "[type=")


def _server(tmp_path, evaluator=None, **config):
    return create_server(ServerConfig(workspace=tmp_path / "ws", force_interpreter=True, **config),
                         evaluator=evaluator or FakeEvaluator())


def _unnull(node: dict[str, Any]) -> dict[str, Any]:
    options = [o for o in node.get("anyOf") or [] if o != {"type": "null"}]
    return options[0] if len(options) == 1 else node


def _kind(node: dict[str, Any]) -> str | None:
    node = _unnull(node)
    if node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict):
        value = node["additionalProperties"]
        kinds = {o.get("type") for o in value.get("anyOf", [value])}
        if kinds == {"integer"}:
            return "sizes"
        return "size_lists" if kinds == {"integer", "array"} else None
    return node.get("type") if node.get("type") in ("integer", "number", "boolean") else None


def _bad_values(kind: str, node: dict[str, Any]) -> list[Any]:
    """Values that must be refused; NaN and inf are not JSON, so they are tried below without the wire."""
    node = _unnull(node)
    if kind == "boolean":
        return [1, 0, 1.0, "true", "false", None, "yes"]
    if kind in ("sizes", "size_lists"):
        bad: list[dict[str, Any]] = [{"batch_size": v} for v in (True, "8", 0, -3, 8.0, 8.5, 10**30,
                                                                 limits.MAX_SIZE_VALUE + 1)]
        if kind == "size_lists":  # a list constant's override: a non-empty list of sizes, each checked the same way
            bad += [{"layer_sizes": v} for v in ([], [8, 0], [8, True], [8, "4"], [8.5], [1] * 65, [[8]])]
        else:
            bad.append({"batch_size": [8, 4]})
        return bad
    lo = node.get("minimum", node.get("exclusiveMinimum"))
    assert lo is not None
    hi = node["maximum"]
    below = lo - 1 if kind == "integer" else lo / 2 if "minimum" in node else lo  # just out of range
    out: list[Any] = [True, False, "3", str(hi), 10**30, -(10**30), hi * 2, below]
    if kind == "integer":
        out += [lo + 0.5, float(lo)]  # a float is not an integer, even 3.0
    else:
        out += [1e-320, -1.0, 0] if lo < 1e-3 else [-1.0, 0]  # denormal, negative, zero
    return out


def _good_values(kind: str, node: dict[str, Any]) -> list[Any]:
    node = _unnull(node)
    if kind == "boolean":
        return [True, False]
    if kind in ("sizes", "size_lists"):
        good = [{"batch_size": 1}, {"batch_size": 8, "dim": limits.MAX_SIZE_VALUE}]
        return good + ([{"layer_sizes": [64, 32]}, {"batch_size": 8, "layer_sizes": [1] * 64}]
                       if kind == "size_lists" else [])
    lo = node.get("minimum", node.get("exclusiveMinimum"))
    hi = node["maximum"]
    if kind == "integer":
        return [lo, hi, (lo + hi) // 2]
    good = [hi, hi / 2, int(hi)]  # a JSON integer is fine where a number is meant
    return good + ([lo] if "minimum" in node else [])


def _assert_plain(msg: str, arg: str) -> None:
    assert arg in msg and "it takes" in msg, msg
    assert not any(leak in msg for leak in LEAKS), msg


async def _tools(server) -> dict[str, Any]:
    return {t.name: t for t in server._tool_manager.list_tools()}


def test_the_table_covers_every_numeric_and_boolean_argument(tmp_path):
    async def main():
        tools = await _tools(_server(tmp_path))
        found = {(name, arg): _kind(node) for name, tool in tools.items()
                 for arg, node in (tool.parameters.get("properties") or {}).items() if _kind(node)}
        assert found == TABLE
        for name, tool in tools.items():  # and every one is strict in the model, not only in the schema
            assert tool.fn_metadata.arg_model.model_config.get("strict") is True, name

    anyio.run(main)


def test_type_table_refuses_loose_values_in_a_sentence_naming_the_argument(tmp_path):
    fake = FakeEvaluator()
    server = _server(tmp_path, fake)

    async def main():
        tools = await _tools(server)
        async with Client(server) as client:
            for (tool, arg), kind in TABLE.items():
                node = tools[tool].parameters["properties"][arg]
                for value in _bad_values(kind, node):
                    msg = await call_error(client, tool, **{**BASE_ARGS[tool], arg: value})
                    _assert_plain(msg, arg)
                    if isinstance(value, str) or (isinstance(value, dict) and isinstance(value.get("batch_size"), str)):
                        assert "got the string" in msg and "without quotes" in msg, msg
                    if value is True or (isinstance(value, dict) and value.get("batch_size") is True):
                        assert "a boolean" in msg, msg
                # NaN and infinities are not JSON (a client's encoder drops them), but a raw line may carry them
                if kind != "boolean":
                    for bad in (math.nan, math.inf, -math.inf):
                        value = {"batch_size": bad} if kind in ("sizes", "size_lists") else bad
                        with pytest.raises(ToolError) as info:
                            await tools[tool].run({**BASE_ARGS[tool], arg: value}, None)
                        _assert_plain(str(info.value), arg)
            assert (await call(client, "list_tasks"))["tasks"] == []
        assert fake.evaluated == 0 and fake.jobs == []

    anyio.run(main)


def test_type_table_accepts_valid_values(tmp_path):
    async def main():
        tools = await _tools(_server(tmp_path))
        for (tool, arg), kind in TABLE.items():
            node = tools[tool].parameters["properties"][arg]
            for value in _good_values(kind, node):
                check_arguments(tools[tool], {**BASE_ARGS[tool], arg: value})  # raises if refused
            if _unnull(node) is not node:  # nullable: null means the default
                check_arguments(tools[tool], {**BASE_ARGS[tool], arg: None})

    anyio.run(main)


def test_strings_the_sdk_would_parse_as_json_are_still_refused(tmp_path):
    """The SDK pre-parses a string argument as JSON for a non-string field: 'true' would become true and
    'null' null. Numbers and flags are checked on the raw call; a JSON object in a string stays a convenience."""
    async def main():
        tools = await _tools(_server(tmp_path))
        for tool, arg, value in (("profile_ncu", "detail", "true"), ("commit_stage", "force", "false"),
                                 ("start_task", "atol", "null"), ("start_task", "k_seeds", "[3]")):
            with pytest.raises(ToolError) as info:
                await tools[tool].run({**BASE_ARGS[tool], arg: value}, None)
            _assert_plain(str(info.value), arg)
            assert "got the string" in str(info.value)
        with pytest.raises(ToolError) as info:
            check_arguments(tools["verify"], {**BASE_ARGS["verify"], "size_overrides": '{"batch_size": "8"}'})
        _assert_plain(str(info.value), 'size_overrides["batch_size"]')
        check_arguments(tools["verify"], {**BASE_ARGS["verify"], "size_overrides": '{"batch_size": 8}'})

    anyio.run(main)


def test_commit_evidence_numbers_are_strict_too(tmp_path):
    async def main():
        tools = await _tools(_server(tmp_path))
        commit = tools["commit_stage"]
        for bad in (True, math.nan, math.inf):
            decision = {"summary": "s", "evidence": [{"metric": "median_ms", "before": bad}]}
            with pytest.raises(ToolError) as info:
                check_arguments(commit, {**BASE_ARGS["commit_stage"], "decision": decision})
            _assert_plain(str(info.value), "decision.evidence[0].before")
        for good in (1, 2.5, "1.2 ms", None):
            decision = {"summary": "s", "evidence": [{"metric": "median_ms", "before": good, "after": 1.0}]}
            check_arguments(commit, {**BASE_ARGS["commit_stage"], "decision": decision})
        with pytest.raises(ToolError) as info:
            check_arguments(commit, {**BASE_ARGS["commit_stage"], "decision": {"summary": 3}})
        _assert_plain(str(info.value), "decision.summary")

    anyio.run(main)


def test_many_bad_arguments_answer_one_sentence_each(tmp_path):
    async def main():
        tools = await _tools(_server(tmp_path))
        with pytest.raises(ToolError) as info:
            check_arguments(tools["start_task"], {"reference": "softmax", "k_seeds": True, "atol": 1e-320,
                                                  "dtype": "float64"})
        msg = str(info.value)
        for arg in ("k_seeds got true", "atol got 1e-320", 'dtype got "float64"'):
            assert arg in msg, msg
        assert msg.count("it takes") == 3 and "one of \"float32\", \"float16\", \"bfloat16\"" in msg
        with pytest.raises(ToolError) as info:
            check_arguments(tools["start_task"], {})
        assert "reference is missing; it takes a string" in str(info.value)

    anyio.run(main)


# -- size_overrides: the footprint check on every tool, before any job -----------------------------------
MIN_BYTES = 2 * 4096 * 8192 * 4  # softmax at its defaults (4096 x 8192 fp32): input and output once


class AnalysedEvaluator(FakeEvaluator):
    """A fake whose reference analysis answers (min_bytes at the sizes asked); every other job is recorded."""

    async def run_job(self, target, payload, *, timeout_s, uses_gpu, wrapper_argv=None):
        if target.endswith(":analyze_job"):
            self.jobs.append((target, timeout_s))
            sizes = dict(payload.get("size_overrides") or {})
            scale = (sizes.get("batch_size", 4096) / 4096) * (sizes.get("dim", 8192) / 8192)
            return JobOutcome(ok=True, result={"summary": "fake analysis", "min_bytes": int(MIN_BYTES * scale),
                                               "size_overrides": sizes})
        return await super().run_job(target, payload, timeout_s=timeout_s, uses_gpu=uses_gpu)


def _decision(summary: str) -> dict[str, Any]:
    return {"summary": summary, "changes": [], "rationale": "test", "evidence": []}


def test_oversize_size_overrides_are_refused_before_any_job_on_every_tool(tmp_path):
    fake = AnalysedEvaluator()
    server = _server(tmp_path, fake, max_eval_bytes=16 * 2**30)
    huge = {"batch_size": limits.MAX_SIZE_VALUE}  # the 2**31-1 that reached the judge
    too_big = {"batch_size": 4096 * 128}  # 32 GiB of traffic: over the 16 GiB limit by the estimate alone

    async def main():
        async with Client(server) as client:
            msg = await call_error(client, "start_task", reference="softmax", size_overrides=huge)
            assert "GiB" in msg and "--max-eval-gib" in msg, msg
            tid = (await call(client, "start_task", reference="softmax", k_seeds=1))["task_id"]
            v = await call(client, "verify", task_id=tid, source=SEEDS[0])
            await call(client, "commit_stage", task_id=tid, candidate_id=v["candidate_id"], decision=_decision("s"))
            jobs, evaluated = len(fake.jobs), fake.evaluated
            for sizes in (huge, too_big, {"batch_size": 8, "dim": 8192 * 128}):
                for tool, args in (("verify", {"source": SEEDS[1]}),
                                   ("profile_ncu", {"candidate_id": v["candidate_id"]})):
                    msg = await call_error(client, tool, task_id=tid, size_overrides=sizes, **args)
                    assert "size_overrides" in msg and "--max-eval-gib" in msg and "limit is 16 GiB" in msg, msg
                # compare and propose_tiling run at the task's sizes (start_task checked them): an override is
                # an unknown argument, refused before anything runs
                for tool, args in (("compare", {"candidate_a": v["candidate_id"], "candidate_b": v["candidate_id"]}),
                                   ("propose_tiling", {"candidate_id": v["candidate_id"]})):
                    msg = await call_error(client, tool, task_id=tid, size_overrides=sizes, **args)
                    assert f"unknown argument(s) size_overrides for {tool}" in msg, msg
            assert (len(fake.jobs), fake.evaluated) == (jobs, evaluated), fake.jobs[jobs:]
            status = await call(client, "task_status", task_id=tid)
            assert len(status["candidates_in_stage"]) == 0 and status["running_jobs"] == 0
            # within the footprint (8 GiB), the quick check runs
            ok = await call(client, "verify", task_id=tid, source=SEEDS[1], size_overrides={"batch_size": 4096 * 32})
            assert ok["verdict"] == "correct" and fake.evaluated == evaluated + 1
            assert fake.options[-1].size_overrides == {"batch_size": 4096 * 32, "dim": 100}

    anyio.run(main)


def test_footprint_is_scaled_from_the_sizes_the_task_was_analysed_at(tmp_path):
    """A task started at its own size_overrides keeps an analysis at those sizes; a later verify is scaled from
    them, not from the reference's defaults (a 4x grow of a task at batch 64 is small, 2**31-1 is not)."""
    fake = AnalysedEvaluator()
    server = _server(tmp_path, fake, max_eval_bytes=2**30)

    async def main():
        async with Client(server) as client:
            started = await call(client, "start_task", reference="softmax", size_overrides={"batch_size": 64})
            tid = started["task_id"]
            assert started["analysis"]["size_overrides"] == {"batch_size": 64}
            ok = await call(client, "verify", task_id=tid, source=SEEDS[0], size_overrides={"batch_size": 256})
            assert ok["verdict"] == "correct"
            evaluated = fake.evaluated
            msg = await call_error(client, "verify", task_id=tid, source=SEEDS[1],
                                   size_overrides={"batch_size": 4096 * 8})
            assert "limit is 1 GiB" in msg and fake.evaluated == evaluated, msg

    anyio.run(main)


def test_service_refuses_loose_tolerances_and_sizes_for_other_callers():
    bad: Any  # wrong types on purpose
    for bad in (True, "0.1", math.nan, 1e-320, 0.0, 2.0):
        with pytest.raises(limits.InputError, match="not allowed"):
            limits.check_tolerance("atol", bad)
    limits.check_tolerance("atol", 1)
    limits.check_tolerance("atol", limits.MIN_TOLERANCE)
    for bad in ({"n": True}, {"n": "8"}, {"n": 0}, {"n": 10**30}, {"n": 8.0}, [("n", 8)]):
        with pytest.raises(limits.InputError, match="not allowed"):
            limits.check_size_values(bad)
    assert json.dumps(limits.MAX_SIZE_VALUE) == "2147483647"
