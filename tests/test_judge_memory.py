"""A verify's judge frees every tensor as soon as it is done with it: none may wait in a reference cycle for the
garbage collector. At a 6 GiB output on the H200, tensors in cycles (the output walker's recursive closures)
held 24-60 GiB of the judge's GPU memory and forced the shared output region into host memory."""

from __future__ import annotations

import gc
import secrets
import weakref
from pathlib import Path

import pytest
import torch

from egg_mcp.contract import EvalOptions
from egg_mcp.evaluation import wire

REPO = Path(__file__).resolve().parent.parent

SOFTMAX_REFERENCE = '''
import torch
import torch.nn as nn

batch_size = 8
dim = 4096


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
'''


@pytest.fixture
def no_collector():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_flattening_an_output_keeps_no_leaf_alive(no_collector):
    t = torch.ones(4)
    alive = weakref.ref(t)
    structure, leaves = wire.flatten_output((t, [t * 2, {"a": t}]), strict=True)
    del leaves, t
    assert alive() is None


def test_decoding_an_output_keeps_no_leaf_alive(no_collector):
    structure, leaves = wire.flatten_output((torch.ones(4), [torch.zeros(2)]))
    specs, blobs = wire.encode_values([leaf for _, leaf in leaves])
    out = wire.decode_output(structure, specs, blobs)
    alive = weakref.ref(out[0])
    del out
    assert alive() is None


def test_a_verify_leaves_no_tensor_in_a_reference_cycle(monkeypatch, tmp_path):
    """The judge of a whole verify (interpreter), with the collector saving what it finds: no tensor."""
    from egg_mcp.evaluation import judge as judge_module

    found: list[str] = []
    clock = judge_module.Judge.clock

    def checked_clock(self, name, *args, **kwargs):
        gc.collect()
        found.extend(f"{self.phase_s and list(self.phase_s)[-1]}: {list(o.shape)}" for o in gc.garbage
                     if isinstance(o, torch.Tensor))
        gc.garbage.clear()
        return clock(self, name, *args, **kwargs)

    monkeypatch.setattr(judge_module.Judge, "clock", checked_clock)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the judge and its runner on the CPU interpreter
    payload = {"kind": "evaluate", "reference_source": SOFTMAX_REFERENCE,
               "candidate_source": (REPO / "tests" / "adversarial" / "correct_row_softmax.py").read_text(),
               "options": EvalOptions(correctness_trials=2).model_dump(mode="json"), "init_seed": secrets.randbits(62),
               "seeds": [secrets.randbits(62) for _ in range(90)], "bounds_floor": None}
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        with torch.no_grad():
            result = judge_module.Judge(payload).run()
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert result["verdict"] == "correct", result.get("summary")
    assert found == []
