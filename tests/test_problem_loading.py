"""One set of KernelBench loading rules for verify, profile_ncu and propose_tiling workers."""

import pytest
import torch

from egg_mcp.problems.modules import import_source
from egg_mcp.problems.problem import Problem, apply_size_overrides, cast_to
from egg_mcp.tiling.trial_problem import TrialProblem

SOURCE = '''
import torch, torch.nn as nn
batch_size = 8
dim = 16
label = "rows"
class Model(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)
    def forward(self, x, pair):
        return self.lin(x) + pair[0].sum()
def get_inputs():
    return [torch.randn(batch_size, dim), [torch.randn(3), torch.arange(3)]]
def get_init_inputs():
    return [dim]
class ModelNew(Model):
    def forward(self, x, pair):
        assert x.shape == (batch_size, dim), "the candidate reads its own module's sizes"
        return super().forward(x, pair)
'''


@pytest.fixture
def module(tmp_path):
    return import_source(SOURCE, tmp_path / "problem.py", f"problem_{tmp_path.name}")


@pytest.fixture
def candidate(tmp_path):
    return import_source(SOURCE, tmp_path / "candidate.py", f"candidate_{tmp_path.name}")


def test_size_overrides_set_integer_constants_of_both_modules(module, candidate):
    apply_size_overrides(module, candidate, {"batch_size": 4})
    assert module.batch_size == 4 and candidate.batch_size == 4 and module.dim == 16


def test_unknown_or_non_integer_override_names_the_valid_ones(module):
    with pytest.raises(ValueError, match=r"\['rows', 'label'\] are not integer constants.*\['batch_size', 'dim'\]"):
        apply_size_overrides(module, None, {"rows": 4, "label": 2})


def test_half_tasks_cast_nested_floats_and_fp32_tasks_keep_dtypes():
    values = [torch.zeros(2, dtype=torch.float64), (torch.ones(2), torch.arange(2)), 3]
    half = cast_to(values, "cpu", torch.bfloat16)
    assert half[0].dtype == torch.bfloat16 and half[1][0].dtype == torch.bfloat16
    assert half[1][1].dtype == torch.int64 and isinstance(half[1], tuple) and half[2] == 3
    full = cast_to(values, "cpu", torch.float32)
    assert full[0].dtype == torch.float64 and full[1][0].dtype == torch.float32


def test_inputs_follow_the_seed_and_models_share_weights(module, candidate):
    problem = Problem(module, "cpu", torch.float32)
    a, b, c = problem.inputs(1), problem.inputs(1), problem.inputs(2)
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0])
    ref = problem.build(module.Model, problem.init_inputs(0), 0)
    new = problem.build(candidate.ModelNew, problem.init_inputs(0), 0)
    assert torch.equal(ref.lin.weight, new.lin.weight)  # pyright: ignore[reportAttributeAccessIssue, reportArgumentType]  # (torch types a submodule as Tensor | Module)
    assert torch.allclose(ref(*a), new(*a))


def test_tiling_worker_uses_the_same_rules(tmp_path, candidate):
    path = tmp_path / "reference.py"
    path.write_text(SOURCE)
    with pytest.raises(ValueError, match="not integer constants"):
        TrialProblem(str(path), "float32", {"rows": 4}, 0, "cpu")
    problem = TrialProblem(str(path), "bfloat16", {"batch_size": 4}, 0, "cpu")
    assert problem.inputs[0].shape == (4, 16) and problem.inputs[0].dtype == torch.bfloat16
    assert problem.inputs[1][0].dtype == torch.bfloat16  # nested inputs are cast too
    model = problem.build(candidate)  # sets the candidate's batch_size, or its assert fails
    assert torch.allclose(model(*problem.inputs).float(), problem.expected().float())
