import pytest

from egg_mcp.stages import STAGE_ORDER, TOOL_STAGES, Stage, allowed, next_stage, refusal


def test_stage_order_is_the_egg_order():
    assert [s.value for s in STAGE_ORDER] == ["SEEDS", "ALGORITHM", "PARALLEL_MAPPING", "TILING", "MEMORY", "DONE"]
    assert next_stage(Stage.SEEDS) is Stage.ALGORITHM
    assert next_stage(Stage.MEMORY) is Stage.DONE
    with pytest.raises(ValueError):
        next_stage(Stage.DONE)


def test_tool_table():
    assert all(allowed("verify", s) for s in STAGE_ORDER)
    assert allowed("generate_seeds", Stage.SEEDS) and not allowed("generate_seeds", Stage.TILING)
    assert allowed("propose_tiling", Stage.TILING) and not allowed("propose_tiling", Stage.SEEDS)
    assert not allowed("commit_stage", Stage.DONE)
    assert set(TOOL_STAGES) >= {"generate_seeds", "verify", "profile_ncu", "propose_tiling", "commit_stage"}


def test_refusal_names_stage_and_next_step():
    msg = refusal("propose_tiling", Stage.SEEDS)
    assert "stage SEEDS" in msg and "TILING" in msg and "generate_seeds" in msg
