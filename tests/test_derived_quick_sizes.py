"""Quick CPU checks for every problem: without QUICK_SIZES, start_task derives small sizes from the reference's
module-level ints (related constants shrunk together, multiples of grouping constants kept), says which, and
falls back to the full sizes, saying why, when the reference does not run at them."""

from __future__ import annotations

import math
from typing import Any

import anyio
import pytest

from egg_mcp.config import ServerConfig
from egg_mcp.problems.loader import QUICK_MIN, derive_quick_sizes


@pytest.mark.parametrize("constants", [
    {"batch_size": 4096, "dim": 393216},
    {"batch_size": 128, "in_channels": 96, "out_channels": 192, "kernel_size": 3, "groups": 8, "height": 256,
     "width": 256},
    {"M": 2048, "K": 4096, "N": 4096},
    {"batch_size": 16, "num_classes": 1000, "input_size": 784, "hidden": 400, "dim": 1},
    {"batch_size": 10, "seq_len": 512, "n_embd": 768, "n_head": 12},
])
def test_derived_sizes_are_small_and_keep_the_relations(constants):
    derived = derive_quick_sizes(constants)
    assert derived, constants
    sizes = {**constants, **derived}
    for key, value in derived.items():  # (ints: these cases have no list constants)
        assert QUICK_MIN <= value < constants[key]  # pyright: ignore[reportOperatorIssue]
    for a in constants:  # every "divides" relation between shrunk constants, and grouping constants, still holds
        for b in constants:
            if a != b and constants[b] % constants[a] == 0 and (a in derived or b in derived) and (
                    a in derived or any(w in a for w in ("group", "head", "kernel"))):
                assert sizes[b] % sizes[a] == 0, (a, b, sizes)
    small = {k: v for k, v in constants.items() if v < 32}
    assert all(sizes[k] == v for k, v in small.items())  # kernel sizes, groups, dim indices untouched
    assert math.prod(derived.values()) < math.prod(constants[k] for k in derived)  # pyright: ignore[reportOperatorIssue]


def test_nothing_to_shrink_gives_no_sizes():
    assert derive_quick_sizes({"batch_size": 16, "dim": 1}) == {}
    assert derive_quick_sizes({}) == {}


NO_QUICK = '''import torch
import torch.nn as nn

batch_size = 512
dim = 4096


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

HARD_CODED = NO_QUICK.replace("return torch.relu(x)", "return torch.relu(x.view(512, 4096))")


def _start(tmp_path, source):
    from mcp import Client

    from egg_mcp.server import create_server
    from tests.mcp_driver import call

    async def main():
        async with Client(create_server(ServerConfig(workspace=tmp_path / "ws", force_interpreter=True))) as client:
            return await call(client, "start_task", reference=source)

    return anyio.run(main)


def test_start_task_on_the_cpu_uses_derived_sizes_and_says_so(tmp_path):
    result = _start(tmp_path, NO_QUICK)
    assert result["options"]["size_overrides"] == {"batch_size": 8, "dim": 64}
    assert any("derived from the reference's constants" in n and "'dim': 64" in n
               for n in result["notes"]), result["notes"]


def test_derived_sizes_the_reference_cannot_run_fall_back_to_full_size_with_the_reason(tmp_path):
    result = _start(tmp_path, HARD_CODED)
    assert result["options"]["size_overrides"] == {}
    assert any("do not run in the reference" in n for n in result["notes"]), result["notes"]


MLP = '''import torch
import torch.nn as nn

batch_size = 128
input_size = 512
layer_sizes = [400, 800]
output_size = 256


class Model(nn.Module):
    def __init__(self, input_size, layer_sizes, output_size):
        super().__init__()
        dims = [input_size, *layer_sizes]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:]))
        self.out = nn.Linear(dims[-1], output_size)

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.out(x)


def get_inputs():
    return [torch.randn(batch_size, input_size)]


def get_init_inputs():
    return [input_size, layer_sizes, output_size]
'''


def test_list_constants_shrink_and_take_list_overrides(tmp_path):
    derived = derive_quick_sizes({"batch_size": 128, "input_size": 512, "layer_sizes": [400, 800], "output_size": 256})
    assert isinstance(derived["layer_sizes"], list) and len(derived["layer_sizes"]) == 2
    assert derived["layer_sizes"][1] % derived["layer_sizes"][0] == 0  # 400 | 800 still holds
    result = _start(tmp_path, MLP)
    sizes = result["options"]["size_overrides"]
    assert sizes["layer_sizes"] == derived["layer_sizes"] and sizes["input_size"] < 512, result["notes"]
    explicit = _start(tmp_path / "explicit", MLP.replace("layer_sizes = [400, 800]", "layer_sizes = (400, 800)"))
    assert isinstance(explicit["options"]["size_overrides"]["layer_sizes"], list)  # a tuple constant shrinks too


def test_a_list_override_reaches_the_reference_as_its_own_kind():
    import types

    from egg_mcp.problems.problem import apply_size_overrides

    module: Any = types.ModuleType("ref")  # its constants are set below
    module.layer_sizes, module.shape, module.batch_size = [400, 800], (3, 224, 224), 16
    apply_size_overrides(module, None, {"layer_sizes": [8, 16], "shape": [3, 8, 8], "batch_size": 2})
    assert module.layer_sizes == [8, 16] and module.shape == (3, 8, 8) and module.batch_size == 2
    with pytest.raises(ValueError, match="not integer constants"):
        apply_size_overrides(module, None, {"batch_size": [2]})  # a list for an int constant
    with pytest.raises(ValueError, match="not integer constants"):
        apply_size_overrides(module, None, {"layer_sizes": 8})  # an int for a list constant
