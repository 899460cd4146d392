import pytest

from egg_mcp.config import ServerConfig
from egg_mcp.problems.builtin import builtin_source
from egg_mcp.problems.loader import ProblemError, check_candidate_contract, resolve_reference

SOFTMAX = builtin_source("softmax")


def test_builtin_and_inline_references(tmp_path):
    cfg = ServerConfig(workspace=tmp_path)
    ref = resolve_reference("softmax", cfg)
    assert ref.origin == "builtin:softmax"
    assert ref.size_constants == {"batch_size": 4096, "dim": 8192}
    assert ref.quick_sizes == {"batch_size": 8, "dim": 100}
    inline = resolve_reference(SOFTMAX, cfg)
    assert inline.origin == "inline" and inline.name.startswith("Row_wise")


def test_paths_only_inside_allowed_roots(tmp_path):
    allowed = tmp_path / "problems"
    allowed.mkdir()
    (allowed / "my_softmax.py").write_text(SOFTMAX)
    outside = tmp_path / "elsewhere.py"
    outside.write_text(SOFTMAX)
    cfg = ServerConfig(workspace=tmp_path / "ws", allowed_roots=[allowed])
    assert resolve_reference(str(allowed / "my_softmax.py"), cfg).name == "my_softmax"
    with pytest.raises(ProblemError, match="outside the directories"):
        resolve_reference(str(outside), cfg)
    # a symlink inside the root pointing outside is still refused
    (allowed / "sneaky.py").symlink_to(outside)
    with pytest.raises(ProblemError, match="outside the directories"):
        resolve_reference(str(allowed / "sneaky.py"), cfg)
    with pytest.raises(ProblemError, match="does not exist"):
        resolve_reference(str(allowed / "missing.py"), cfg)


def test_kernelbench_ids(tmp_path):
    level = tmp_path / "KernelBench" / "KernelBench" / "level1"
    level.mkdir(parents=True)
    (level / "23_Softmax.py").write_text(SOFTMAX)
    cfg = ServerConfig(workspace=tmp_path / "ws", kernelbench_dir=tmp_path / "KernelBench")
    for ident in ("level1/23", "level1/23_Softmax", "level1/23_Softmax.py", "kernelbench:level1/23"):
        ref = resolve_reference(ident, cfg)
        assert ref.name == "23_Softmax" and ref.origin == "kernelbench:level1/23_Softmax.py"
    with pytest.raises(ProblemError, match="no problem 99"):
        resolve_reference("level1/99", cfg)
    with pytest.raises(ProblemError, match="no KernelBench checkout"):
        resolve_reference("level1/23", ServerConfig(workspace=tmp_path / "ws"))


def test_reference_contract_errors(tmp_path):
    cfg = ServerConfig(workspace=tmp_path)
    with pytest.raises(ProblemError, match="get_init_inputs"):
        resolve_reference("import torch\nclass Model:\n    pass\ndef get_inputs():\n    return []\n", cfg)
    with pytest.raises(ProblemError, match="does not parse"):
        resolve_reference("class Model(:\n", cfg)
    with pytest.raises(ProblemError, match="limit"):
        resolve_reference("class Model: pass\n" + "#" * 300_000, cfg)
    with pytest.raises(ProblemError, match="empty"):
        resolve_reference("   ", cfg)


def test_candidate_contract():
    assert check_candidate_contract("class ModelNew:\n    pass\n", 10_000).ok
    bad = check_candidate_contract("class ModelNew(:\n", 10_000)
    assert not bad.ok and bad.syntax_error_line == 1
    with pytest.raises(ProblemError, match="defines no ModelNew"):
        check_candidate_contract("class Model:\n    pass\n", 10_000)
    with pytest.raises(ProblemError, match="limit"):
        check_candidate_contract("class ModelNew: pass\n" + "#" * 20_000, 10_000)
