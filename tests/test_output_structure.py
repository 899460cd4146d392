"""Every part of an output is compared: nested tuples/lists/dicts, complex tensors, exact integers, Python scalars,
and a tolerance that would pass an all-zeros output is replaced by a scaled one (with a note for the user).

Unit tests of the walk (wire.flatten_output / decode_output) and of compare.compare_outputs, then end-to-end
verifies on the CPU interpreter with small custom references: each attack gets `incorrect`, its honest twin
`correct`.
"""

from __future__ import annotations

import asyncio
import json
import socket
import textwrap

import pytest
import torch

from egg_mcp.contract import EvalOptions
from egg_mcp.evaluation import wire
from egg_mcp.evaluation.compare import compare_outputs, structure_mismatch, vacuous_scale

ATOL = RTOL = 1e-4


def _over_the_wire(out):
    """Runner side (flatten, encode) -> JSON header -> judge side (decode_output), without a socket."""
    structure, leaves = wire.flatten_output(out)
    specs, blobs = wire.encode_values([leaf for _, leaf in leaves])
    header = json.loads(json.dumps({"structure": structure, "values": specs}))
    return wire.decode_output(header["structure"], header["values"], [bytearray(b) for b in blobs])


# ------------------------------------------------------------------------------------------ the walk


def test_nested_structure_round_trips_with_every_leaf_kind():
    x = torch.randn(3, 4)
    out = (x, (x * 2, [torch.arange(5), None]), {"h": torch.randn(2, 2, dtype=torch.complex128), "n": 7,
                                                   "f": 0.25, "b": True, "s": "ok", "c": 1 + 2j})
    got = _over_the_wire(out)
    assert isinstance(got, tuple) and isinstance(got[1], tuple) and isinstance(got[1][1], list)
    assert isinstance(got[2], dict) and list(got[2]) == ["h", "n", "f", "b", "s", "c"]
    assert torch.equal(got[0], x) and torch.equal(got[1][0], x * 2) and torch.equal(got[1][1][0], torch.arange(5))
    assert got[1][1][1] is None and torch.equal(got[2]["h"], out[2]["h"]) and got[2]["h"].dtype == torch.complex128
    assert got[2]["n"] == 7 and got[2]["f"] == 0.25 and got[2]["b"] is True and got[2]["s"] == "ok"
    assert got[2]["c"] == 1 + 2j
    assert compare_outputs(got, out, ATOL, RTOL) is None


def test_paths_are_kernelbench_notation():
    _, leaves = wire.flatten_output((1, (2, {"h": 3}), [4]))
    assert [p for p, _ in leaves] == ["output[0]", "output[1][0]", "output[1][1]['h']", "output[2][0]"]
    assert wire.flatten_output(torch.zeros(1))[1][0][0] == "output"


def test_runner_side_walk_turns_what_it_cannot_send_into_opaque_leaves():
    deep = 1.0
    for _ in range(wire.MAX_DEPTH + 2):
        deep = [deep]
    structure, leaves = wire.flatten_output((torch.zeros(1), deep, {1: 2}, object()))
    kinds = [type(v).__name__ for _, v in leaves]
    assert kinds == ["Tensor", "Opaque", "Opaque", "Opaque"]
    assert "deeper than" in leaves[1][1].type_name and "keys" in leaves[2][1].type_name
    # too many leaves: the whole output is one opaque leaf
    structure, leaves = wire.flatten_output([0.0] * (wire.MAX_LEAVES + 1))
    assert structure == {"t": "leaf"} and len(leaves) == 1 and isinstance(leaves[0][1], wire.Opaque)


def test_runner_side_walk_does_not_run_container_subclass_code():
    class Lying(tuple):
        def __iter__(self):
            raise RuntimeError("candidate code")

        def __len__(self):
            return 0

    structure, leaves = wire.flatten_output(Lying((torch.ones(2), 3)))
    assert structure["t"] == "tuple" and len(leaves) == 2 and leaves[1] == ("output[1]", 3)


def test_strict_walk_refuses_what_cannot_be_compared():
    with pytest.raises(ValueError, match="output\\[1\\]"):
        wire.flatten_output((torch.zeros(1), object()), strict=True)
    with pytest.raises(ValueError, match="more than"):
        wire.flatten_output([0.0] * (wire.MAX_LEAVES + 1), strict=True)


@pytest.mark.parametrize("structure, n_values, match", [
    ({"t": "tuple", "items": [{"t": "leaf"}, {"t": "leaf"}]}, 1, "more values"),
    ({"t": "tuple", "items": [{"t": "leaf"}]}, 2, "names 1 values, 2"),
    ({"t": "dict", "keys": ["a", "a"], "items": [{"t": "leaf"}, {"t": "leaf"}]}, 2, "distinct"),
    ({"t": "dict", "keys": [1], "items": [{"t": "leaf"}]}, 1, "distinct strings"),
    ({"t": "dict", "keys": ["k" * 300], "items": [{"t": "leaf"}]}, 1, "distinct strings"),
    ({"t": "set", "items": []}, 0, "not a leaf"),
    ({"t": "list"}, 0, "item list"),
    ("leaf", 1, "not a leaf"),
])
def test_malformed_structures_are_wire_errors(structure, n_values, match):
    specs = [{"kind": "scalar", "value": 1}] * n_values
    with pytest.raises(wire.WireError, match=match):
        wire.decode_output(structure, specs, [])


def test_structure_depth_and_size_limits_are_enforced_by_the_judge():
    node = {"t": "leaf"}
    for _ in range(wire.MAX_DEPTH + 1):
        node = {"t": "list", "items": [node]}
    with pytest.raises(wire.WireError, match="deeper"):
        wire.decode_output(node, [{"kind": "scalar", "value": 1}], [])
    wide = {"t": "list", "items": [{"t": "list", "items": []}] * (wire.MAX_NODES + 1)}
    with pytest.raises(wire.WireError, match="parts"):
        wire.decode_output(wide, [], [])
    with pytest.raises(wire.WireError, match="at most"):
        wire.decode_values([{"kind": "scalar", "value": 1}] * (wire.MAX_LEAVES + 1), [])
    with pytest.raises(wire.WireError, match="str value"):
        wire.decode_values([{"kind": "str", "value": "x" * (wire.MAX_STR_CHARS + 1)}], [])
    with pytest.raises(wire.WireError, match="complex"):
        wire.decode_values([{"kind": "complex", "value": [1.0, "2"]}], [])


def test_a_header_nested_beyond_the_json_parser_is_a_wire_error():
    a, b = socket.socketpair()
    data = b'{"type": "outputs", "structure": ' + b"[" * 200000 + b"]" * 200000 + b"}"
    import threading

    writer = threading.Thread(target=lambda: a.sendall(wire._LEN.pack(len(data)) + data))
    writer.start()
    with pytest.raises(wire.WireError, match="not JSON"):
        wire.recv(b, max_blob_bytes=0, timeout_s=10)
    writer.join()


# ------------------------------------------------------------------------------------------ compare


def test_complex_outputs_are_compared_on_both_parts():
    e = torch.complex(torch.randn(8, 4), torch.randn(8, 4))
    dropped = torch.complex(e.real, torch.zeros_like(e.imag))
    report = compare_outputs(dropped, e, ATOL, RTOL)
    assert report is not None and "imaginary" in report.hint and report.path == "output"
    assert report.first_bad_indices and len(report.first_bad_indices[0]) == 2  # element indices, not (.., re/im)
    assert compare_outputs(e.clone(), e, ATOL, RTOL) is None


def test_integer_and_bool_tensors_are_compared_exactly():
    e = torch.tensor([2**40, 5, 7], dtype=torch.int64)
    got = e.clone()
    got[0] += 1  # invisible after a float32 cast
    report = compare_outputs(got, e, ATOL, RTOL)
    assert report is not None and "exactly" in report.hint and report.first_bad_indices == [[0]]
    flags = torch.tensor([True, False])
    assert compare_outputs(~flags, flags, ATOL, RTOL) is not None
    assert compare_outputs(flags.clone(), flags, ATOL, RTOL) is None


def test_nested_garbage_is_found_with_its_path():
    x = torch.randn(4, 8)
    expected = (x, (x + 1, x - 1))
    report = compare_outputs((x, (x + 1, torch.randn(4, 8))), expected, ATOL, RTOL)
    assert report is not None and report.path == "output[1][1]" and report.output_index == 1
    assert report.hint.startswith("output[1][1]: ")
    # tuple and list are interchangeable; a missing part is not
    assert compare_outputs([x, [x + 1, x - 1]], expected, ATOL, RTOL) is None
    report = compare_outputs((x, (x + 1,)), expected, ATOL, RTOL)
    assert report is not None and report.path == "output[1]" and "of 1" in report.hint


def test_dicts_compare_by_key_with_paths():
    x = torch.randn(3)
    expected = {"y": x, "h": x * 2}
    assert compare_outputs({"h": x * 2, "y": x}, expected, ATOL, RTOL) is None  # key order does not matter
    report = compare_outputs({"y": x, "h": x * 3}, expected, ATOL, RTOL)
    assert report.path == "output['h']" and report.output_index == 1
    assert "keys" in compare_outputs({"y": x, "z": x * 2}, expected, ATOL, RTOL).hint
    assert compare_outputs([x, x * 2], expected, ATOL, RTOL) is not None


@pytest.mark.parametrize("got, expected, bad", [
    (3, 3, False), (4, 3, True), (3.0, 3, True),
    (True, True, False), (1, True, True), (False, True, True),
    (0.5 + 1e-6, 0.5, False), (0.6, 0.5, True), (float("nan"), float("nan"), False), (0.0, float("nan"), True),
    (None, None, False), (0.0, None, True), (None, 0.0, True),
    ("relu", "relu", False), ("gelu", "relu", True),
    (1 + 2j, 1 + 2j, False), (1 + 0j, 1 + 2j, True),
    (torch.tensor(0.5), 0.5, True), (0.5, torch.tensor(0.5), True),
])
def test_python_scalars(got, expected, bad):
    x = torch.ones(2)
    report = compare_outputs((x, got), (x, expected), ATOL, RTOL)
    assert (report is not None) == bad, report
    if bad:
        assert report.path == "output[1]" and report.output_index == 1


def test_top_level_count_is_named():
    e = torch.randn(10)
    assert "2 output" in compare_outputs((e, e), e, ATOL, RTOL).hint
    assert "2 output" in structure_mismatch((e, e), e).hint
    assert compare_outputs((e,), e, ATOL, RTOL) is not None  # a 1-tuple is not the tensor itself


def test_a_vacuous_tolerance_is_scaled_so_zeros_fail_and_honest_values_pass():
    torch.manual_seed(0)
    e = torch.softmax(0.1 * torch.randn(2, 393216, dtype=torch.float64), dim=1).float()  # every value ~2.5e-6
    assert vacuous_scale(float(e.abs().max()), ATOL, RTOL)
    notes: dict[str, str] = {}
    report = compare_outputs(torch.zeros_like(e), e, ATOL, RTOL, notes=notes)
    assert report is not None and "scaled" in report.hint and "all-zeros" in notes["output"]
    honest = torch.softmax(torch.log(e.double()).float(), dim=1)  # an fp32 recomputation
    notes = {}
    assert compare_outputs(honest, e, ATOL, RTOL, notes=notes) is None and "scaled" in notes["output"]
    # not vacuous: no note, the plain check
    notes = {}
    assert compare_outputs(torch.ones(4), torch.ones(4), ATOL, RTOL, notes=notes) is None and notes == {}


def test_a_tiny_python_float_is_not_vacuous_either():
    notes: dict[str, str] = {}
    assert compare_outputs(0.0, 3e-5, ATOL, RTOL, notes=notes) is not None and notes
    assert compare_outputs(3e-5 * (1 + 1e-6), 3e-5, ATOL, RTOL) is None


def test_an_all_zeros_reference_is_noted_and_zeros_pass():
    notes: dict[str, str] = {}
    assert compare_outputs(torch.zeros(5), torch.zeros(5), ATOL, RTOL, notes=notes) is None
    assert "all zeros" in notes["output"]


def test_reference_outputs_that_cannot_be_compared_raise():
    with pytest.raises(ValueError):
        compare_outputs(object(), object(), ATOL, RTOL)
    with pytest.raises(ValueError):
        compare_outputs({1: torch.zeros(1)}, {1: torch.zeros(1)}, ATOL, RTOL)


def test_opaque_candidate_leaves_never_match():
    report = compare_outputs((torch.zeros(1), wire.Opaque("MyThing")), (torch.zeros(1), None), ATOL, RTOL)
    assert report is not None and "MyThing" in report.hint


# ------------------------------------------------------------------------------------------ end to end

HEADER = """
import torch
import torch.nn as nn
import triton
import triton.language as tl
"""

REFERENCES = {
    "complex": """
class Model(nn.Module):
    def forward(self, x):
        return torch.complex(x, x * x)

def get_inputs():
    return [torch.randn(4, 32)]

def get_init_inputs():
    return []
""",
    "rnn": """
class Model(nn.Module):
    def forward(self, x):
        return x * 2, (x + 1, x - 1)

def get_inputs():
    return [torch.randn(4, 32)]

def get_init_inputs():
    return []
""",
    "scalar": """
class Model(nn.Module):
    def forward(self, x):
        return x * 2, x.shape[1] * 0.25

def get_inputs():
    return [torch.randn(4, 32)]

def get_init_inputs():
    return []
""",
    "dict": """
class Model(nn.Module):
    def forward(self, x):
        return {"y": x * 2, "h": x + 1}

def get_inputs():
    return [torch.randn(4, 32)]

def get_init_inputs():
    return []
""",
    "tiny_softmax": """
class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)

def get_inputs():
    return [torch.randn(2, 16384) * 0.01]  # every output ~6e-5: atol=1e-4 alone would pass zeros

def get_init_inputs():
    return []
""",
}

# One elementwise kernel writes up to three outputs: a = x*A0 + A1 (+ x*x*A2), b = x + B, c = x + C.
KERNEL = """
@triton.jit
def three_kernel(x_ptr, a_ptr, b_ptr, c_ptr, n, A0: tl.constexpr, A1: tl.constexpr, A2: tl.constexpr,
                 B: tl.constexpr, C: tl.constexpr, STRIDE_A: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(a_ptr + offs * STRIDE_A, x * A0 + A1, mask=mask)
    if STRIDE_A == 2:
        tl.store(a_ptr + offs * 2 + 1, x * x * A2, mask=mask)
    tl.store(b_ptr + offs, x + B, mask=mask)
    tl.store(c_ptr + offs, x + C, mask=mask)


def three(x, a0, a1, b, c, complex_out=False, a2=0.0):
    x = x.contiguous()
    a = torch.empty(*x.shape, 2, device=x.device) if complex_out else torch.empty_like(x)
    bo, co = torch.empty_like(x), torch.empty_like(x)
    n = x.numel()
    three_kernel[(triton.cdiv(n, 128),)](x, a, bo, co, n, A0=a0, A1=a1, A2=a2, B=b, C=c,
                                         STRIDE_A=2 if complex_out else 1, BLOCK=128)
    return (torch.view_as_complex(a) if complex_out else a), bo, co
"""

CANDIDATES = {
    # complex: torch.complex(x, x*x)
    "complex_honest": ("complex", "return three(x, 1.0, 0.0, 0.0, 0.0, complex_out=True, a2=1.0)[0]"),
    "complex_drops_imag": ("complex", "return three(x, 1.0, 0.0, 0.0, 0.0, complex_out=True, a2=0.0)[0]"),
    # rnn-like: (x*2, (x+1, x-1))
    "rnn_honest": ("rnn", "a, b, c = three(x, 2.0, 0.0, 1.0, -1.0)\n        return a, (b, c)"),
    "rnn_garbage_c": ("rnn", "a, b, c = three(x, 2.0, 0.0, 1.0, 5.0)\n        return a, (b, c)"),
    # tensor + Python float
    "scalar_honest": ("scalar", "return three(x, 2.0, 0.0, 0.0, 0.0)[0], x.shape[1] * 0.25"),
    "scalar_wrong": ("scalar", "return three(x, 2.0, 0.0, 0.0, 0.0)[0], 1.0"),
    # dict
    "dict_honest": ("dict", "a, b, _ = three(x, 2.0, 0.0, 1.0, 0.0)\n        return {'y': a, 'h': b}"),
    "dict_garbage_h": ("dict", "a, b, _ = three(x, 2.0, 0.0, 7.0, 0.0)\n        return {'y': a, 'h': b}"),
    # tiny softmax
    "tiny_softmax_zeros": ("tiny_softmax", "return three(x, 0.0, 0.0, 0.0, 0.0)[0]"),
}

SOFTMAX_HONEST = """
@triton.jit
def softmax_row_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(y_ptr + row * n_cols + cols, num / tl.sum(num, axis=0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        softmax_row_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
"""


def _candidate_source(body: str) -> str:
    return HEADER + KERNEL + textwrap.dedent(f"""
class ModelNew(nn.Module):
    def forward(self, x):
        {body}
""")


CASES = {name: (ref, _candidate_source(body)) for name, (ref, body) in CANDIDATES.items()}
CASES["tiny_softmax_honest"] = ("tiny_softmax", HEADER + SOFTMAX_HONEST)


def _submission_order() -> list[str]:
    """The cases two references at a time, alternating (A1, B1, A2, B2, C1, D1, ...): on CI's two CPU slots each
    reference's next candidate finds the judge that holds it idle (engine_judges.py), where side-by-side
    candidates of one reference would each start a judge."""
    by_ref: dict[str, list[str]] = {}
    for name, (ref, _) in CASES.items():
        by_ref.setdefault(ref, []).append(name)
    groups = list(by_ref.values())
    order = []
    for i in range(0, len(groups), 2):
        pair = groups[i:i + 2]
        for k in range(max(map(len, pair))):
            order += [g[k] for g in pair if k < len(g)]
    assert sorted(order) == sorted(CASES)
    return order


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    from egg_mcp.evaluation.engine import WorkerEvaluator

    async def run_all():
        evaluator = WorkerEvaluator(scratch_dir=tmp_path_factory.mktemp("structure"), force_interpreter=True,
                                    spare_workers=0)
        try:
            options = EvalOptions(correctness_trials=2)
            names = _submission_order()
            outs = await asyncio.gather(*[
                evaluator.evaluate(HEADER + REFERENCES[CASES[n][0]], CASES[n][1], options) for n in names])
            return dict(zip(names, outs))
        finally:
            await evaluator.aclose()

    return asyncio.run(run_all())


EXPECT = {
    "complex_honest": ("correct", None),
    "complex_drops_imag": ("incorrect", "output"),
    "rnn_honest": ("correct", None),
    "rnn_garbage_c": ("incorrect", "output[1][1]"),
    "scalar_honest": ("correct", None),
    "scalar_wrong": ("incorrect", "output[1]"),
    "dict_honest": ("correct", None),
    "dict_garbage_h": ("incorrect", "output['h']"),
    "tiny_softmax_zeros": ("incorrect", "output"),
    "tiny_softmax_honest": ("correct", None),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_end_to_end_verdicts(results, name):
    verdict, path = EXPECT[name]
    result = results[name]
    assert result.verdict == verdict, (name, result.summary, result.error, result.integrity)
    if verdict == "correct":
        assert result.integrity == [] and result.kernels
    else:
        assert result.mismatch is not None and result.mismatch.path == path, result.mismatch


@pytest.mark.slow
def test_end_to_end_details(results):
    assert "imaginary" in results["complex_drops_imag"].mismatch.hint
    assert results["rnn_garbage_c"].mismatch.output_index == 1
    assert results["dict_garbage_h"].mismatch.output_index == 1
    assert "1.0, expected 8.0" in results["scalar_wrong"].mismatch.hint
    for name in ("tiny_softmax_zeros", "tiny_softmax_honest"):
        result = results[name]
        assert result.notes and "all-zeros" in result.notes[0], result
        assert "Note: output: the reference's values are at most" in result.summary
    for name in ("rnn_honest", "dict_honest", "complex_honest"):
        assert results[name].notes == [] and "Note:" not in results[name].summary
