"""Stage briefs render for every stage and role, with their JSON contracts (pure, quick)."""

from __future__ import annotations

import json
import re

import pytest

from egg_mcp.contract import LOOSE, STRICT_FP32
from egg_mcp.expertise import briefs
from egg_mcp.expertise.briefs import BRIEF_STAGES, BriefFacts, list_briefs, prompts_dir, render_brief
from egg_mcp.stages import Stage

ROLE_KEYS = {
    "code": ["source", "changes", "expected_effect"],
    "profile": ["bottleneck", "evidence", "metric", "value", "why", "plan", "change", "expected_effect"],
    "debug": ["failure_class", "cause", "fix"],
}
COMMIT_KEYS = ["summary", "changes", "rationale", "evidence", "metric", "before", "after"]

FULL = BriefFacts(
    task_id="t-42", problem_name="gemm_bias_relu", dtype="float32", tolerance=STRICT_FP32,
    gpu_name="NVIDIA H200", analysis_summary="Model(4096x4096) float32 -> 4096x4096", floor_ms=2.7,
    eager_ms=3.1, compile_ms=3.0, best_ms=2.9, committed_decisions=["SEEDS: tiled grouped GEMM, fused epilogue"],
    stage=Stage.TILING, has_gpu=True, min_bytes=201_342_976, unfused_bytes=335_560_704,
    fusion_opportunities=["fuse addmm -> relu"], k=4,
)


def json_blocks(text: str) -> list[dict]:
    return [json.loads(b) for b in re.findall(r"```json\n(.*?)\n```", text, re.S)]


def all_keys(obj) -> set[str]:
    if isinstance(obj, dict):
        return set(obj) | {k for v in obj.values() for k in all_keys(v)}
    if isinstance(obj, list):
        return {k for v in obj for k in all_keys(v)}
    return set()


@pytest.mark.parametrize("stage", BRIEF_STAGES)
@pytest.mark.parametrize("role", ["code", "profile", "debug"])
def test_every_brief_renders_with_its_json_contract(stage, role):
    text = render_brief(stage, role, FULL)
    assert "${" not in text and "<!--" not in text
    assert text.startswith(f"# {stage.value} · ")
    blocks = json_blocks(text)
    assert blocks, "the return contract must be valid JSON"
    keys = all_keys(blocks[0])
    assert set(ROLE_KEYS[role]) <= keys
    if role == "code":
        assert set(COMMIT_KEYS) <= all_keys(blocks[1])
    assert "gemm_bias_relu" in text and "t-42" in text
    assert "## Goal" in text and "## Tools" in text
    assert len(text) < 5000  # a client's context is precious


@pytest.mark.parametrize("stage", BRIEF_STAGES)
@pytest.mark.parametrize("role", ["code", "profile", "debug"])
def test_missing_facts_render_as_unknown(stage, role):
    text = render_brief(stage, role, BriefFacts())
    assert "unknown" in text and "${" not in text and "None" not in text


def test_code_briefs_say_what_may_and_may_not_change():
    for stage in BRIEF_STAGES:
        text = render_brief(stage, "code", FULL)
        assert "May" in text and "Must keep" in text, stage


def test_tiling_code_brief_explains_the_tunable_convention():
    text = render_brief(Stage.TILING, "code", FULL)
    for needle in ("UPPERCASE", "BLOCK_M = 128", "NUM_WARPS", "NUM_STAGES", "TUNING_SPACE", "propose_tiling",
                   "G_i = ceil(d_i / B_i)", "227 KiB", "132 SMs"):
        assert needle in text, needle


def test_timings_without_gpu_say_so():
    text = render_brief(Stage.SEEDS, "code", BriefFacts(problem_name="softmax", has_gpu=False, floor_ms=0.06))
    assert "eager needs a GPU" in text and "torch.compile needs a GPU" in text
    assert "62.4 us" not in text and "60 us" in text


def test_facts_appear_in_the_header():
    text = render_brief(Stage.MEMORY, "profile", FULL)
    assert "2.9 ms" in text and "3.1 ms" in text and "93% of the floor 2.7 ms" in text and "at the roof" in text
    assert "kernelbench-v0.1 (atol=1e-4, rtol=1e-4)" in text
    assert "SEEDS: tiled grouped GEMM" in text
    assert "4.3 TB/s" in text


def test_precision_follows_the_policy():
    strict = render_brief(Stage.SEEDS, "code", FULL)
    loose = render_brief(Stage.SEEDS, "code", FULL.model_copy(update={"tolerance": LOOSE}))
    assert 'input_precision="ieee"' in strict
    assert "TF32 tl.dot allowed" in loose
    half = render_brief(Stage.SEEDS, "debug", FULL.model_copy(update={"dtype": "bfloat16"}))
    assert "accumulate in fp32" in half


def test_only_the_latest_decisions_are_repeated():
    facts = FULL.model_copy(update={"committed_decisions": [f"decision {i}" for i in range(9)]})
    text = render_brief(Stage.MEMORY, "code", facts)
    assert "decision 8" in text and "decision 3" not in text and "4 earlier" in text


def test_list_briefs_covers_every_stage_and_role_with_descriptions():
    items = list_briefs()
    assert len(items) == 15
    assert {(s, r) for s, r, _ in items} == {(s, r) for s in BRIEF_STAGES for r in ("code", "profile", "debug")}
    assert all(d and len(d) < 120 and "\n" not in d for _, _, d in items)


def test_prompt_files_exist_and_prompts_dir_finds_the_checkout():
    d = prompts_dir()
    assert (d / "_header.md").is_file()
    for stage in BRIEF_STAGES:
        for role in ("code", "profile", "debug"):
            assert (d / f"{stage.value.lower()}_{role}.md").is_file()


def test_prompts_dir_prefers_package_data(tmp_path, monkeypatch):
    pkg = tmp_path / "egg_mcp"
    (pkg / "expertise").mkdir(parents=True)
    (pkg / "stage_prompts").mkdir()
    (pkg / "stage_prompts" / "_header.md").write_text("x")
    monkeypatch.setattr(briefs, "__file__", str(pkg / "expertise" / "briefs.py"))
    assert briefs.prompts_dir() == pkg / "stage_prompts"
    (pkg / "stage_prompts" / "_header.md").unlink()
    with pytest.raises(FileNotFoundError, match="stage_prompts"):
        briefs.prompts_dir()


def test_done_and_bad_role():
    assert "export_kernel" in render_brief(Stage.DONE, "code", FULL)
    with pytest.raises(ValueError, match="role"):
        render_brief(Stage.SEEDS, "review", FULL)  # type: ignore[arg-type]
