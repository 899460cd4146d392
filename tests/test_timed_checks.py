"""The timed-call audit's pieces on the CPU: planning and refilling audited calls, keeping their outputs, and the
judge's checks of launches, audited outputs and the physical limit (tests/gpu/test_timed_audit_gpu.py runs them
against real cheats on a GPU)."""

from __future__ import annotations

import random

import torch

from egg_mcp.evaluation import timed_audit, timed_checks
from egg_mcp.evaluation.compare import compare_tensor


def fresh(seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(4, 8, generator=g)]


def reference(seed: int):
    return fresh(seed)[0].softmax(-1)


def compare(got, exp):
    m = compare_tensor(got, exp, 1e-5, 1e-5)
    return None if m is None else m.hint


def run_reading(audit: timed_audit.TimedCallAudit, forward, n_calls: int = 20, n_sets: int = 3) -> list[list]:
    """What GpuTimer._measure_events does with an audit, minus the events."""
    sets = [fresh(1000 + k) for k in range(n_sets)]
    audit.plan(n_calls, "timed")
    for i in range(n_calls):
        audit.before(i, sets[i % n_sets])
        audit.after(i, forward(sets[i % n_sets]))
    return sets


def judge(audit: timed_audit.TimedCallAudit):
    calls, flat = audit.wire_values()
    return timed_checks.audit_findings(calls, flat, reference, compare)


def test_an_honest_reading_passes_and_audits_random_calls_plus_the_last():
    audit = timed_audit.TimedCallAudit(fresh, list(range(50)), rng=random.Random(3))
    run_reading(audit, lambda xs: xs[0].softmax(-1))
    assert len(audit.kept) == 1 + timed_audit.PER_READING
    assert audit.kept[-1]["where"] == "timed call 20"
    assert judge(audit) == ([], None)


def test_audited_inputs_are_refilled_in_place_and_others_only_touched():
    audit = timed_audit.TimedCallAudit(fresh, [7, 8, 9], rng=random.Random(0))
    inputs = fresh(1)
    pointer, before = inputs[0].data_ptr(), inputs[0].clone()
    audit.plan(5, "timed")
    audit.positions = {4}
    version = inputs[0]._version
    audit.before(0, inputs)
    assert torch.equal(inputs[0], before) and inputs[0]._version > version  # touched, same contents
    audit.before(4, inputs)
    assert inputs[0].data_ptr() == pointer and torch.equal(inputs[0], fresh(9)[0])  # new contents, same tensor


def test_a_cache_by_pointer_while_timed_is_caught():
    cache: dict[int, torch.Tensor] = {}

    def cached(xs):
        key = xs[0].data_ptr()
        if key not in cache:
            cache[key] = xs[0].softmax(-1)
        return cache[key]

    audit = timed_audit.TimedCallAudit(fresh, list(range(50)), rng=random.Random(1))
    run_reading(audit, cached)
    findings, error = judge(audit)
    assert error is None
    assert [f.check for f in findings] == ["timed_output"]
    assert "behaves differently while timed" in findings[0].detail


def test_kept_outputs_are_copies_a_later_fix_up_cannot_change():
    audit = timed_audit.TimedCallAudit(fresh, [5], rng=random.Random(0))
    inputs = fresh(1)
    audit.plan(1, "timed")
    audit.before(0, inputs)
    out = torch.zeros(4, 8)
    audit.after(0, out)
    out.copy_(reference(5))  # the candidate fixes its returned buffer after the call
    findings, _ = judge(audit)
    assert [f.check for f in findings] == ["timed_output"]


def test_graph_reading_refills_every_set_and_audits_after_the_replay():
    audit = timed_audit.TimedCallAudit(fresh, list(range(100)), rng=random.Random(2))
    sets = [fresh(1000 + k) for k in range(6)]
    captured = {k: torch.empty(4, 8) for k in range(6)}

    def replay(work: bool):
        for k in range(6):
            if work:
                captured[k].copy_(sets[k][0].softmax(-1))

    replay(True)
    audit.refill_sets(sets)
    replay(True)  # an honest graph recomputes from the new contents
    audit.keep_graph(captured, "graph replay")
    assert len(audit.kept) == min(6, timed_audit.GRAPH_SETS + 1)
    assert judge(audit) == ([], None)

    lazy = timed_audit.TimedCallAudit(fresh, list(range(200, 300)), rng=random.Random(2))
    lazy.refill_sets(sets)
    replay(False)  # kernels that skip their work on later replays leave the old outputs
    lazy.keep_graph(captured, "graph replay")
    assert [f.check for f in judge(lazy)[0]] == ["timed_output"]


def test_large_leaves_are_kept_as_a_sample_the_judge_checks(monkeypatch):
    monkeypatch.setattr(timed_audit, "FULL_LEAF_BYTES", 64)
    monkeypatch.setattr(timed_audit, "SAMPLE_ELEMENTS", 16)
    audit = timed_audit.TimedCallAudit(fresh, [3], rng=random.Random(0))
    audit.keep(3, reference(3), "timed call 1")
    calls, flat = audit.wire_values()
    leaf = calls[0]["leaves"][0]
    assert leaf["kind"] == "sample" and 2 <= leaf["stride"] < 4 and 0 <= leaf["offset"] < leaf["stride"]
    assert len(flat) == 1 and flat[0].numel() == len(range(leaf["offset"], 32, leaf["stride"]))  # spans the output
    assert timed_checks.audit_findings(calls, flat, reference, compare) == ([], None)
    bad = timed_audit.TimedCallAudit(fresh, [3], rng=random.Random(0))
    bad.keep(3, torch.zeros(4, 8), "timed call 1")
    calls, flat = bad.wire_values()
    assert [f.check for f in timed_checks.audit_findings(calls, flat, reference, compare)[0]] == ["timed_output"]
    calls[0]["leaves"][0]["shape"] = [8, 4]
    assert timed_checks.audit_findings(calls, flat, reference, compare)[0][0].check == "timed_output"
    calls[0]["leaves"][0]["shape"] = [4, 8]
    calls[0]["leaves"][0]["offset"] = calls[0]["leaves"][0]["stride"]
    assert timed_checks.audit_findings(calls, flat, reference, compare)[1] is not None  # an offset past its stride
    calls[0]["leaves"][0]["offset"] = 0
    flat[0] = flat[0][:3]
    assert timed_checks.audit_findings(calls, flat, reference, compare)[1] is not None  # fewer values than it says


def test_timed_calls_must_launch_what_checked_calls_launched():
    sig = timed_checks.signature([["softmax_kernel", [256]]])
    assert sig is not None
    checked = {sig}
    same = [[[["softmax_kernel", [256]]], 40]]
    assert timed_checks.launch_findings(checked, same) == ([], None)
    none = [[[["softmax_kernel", [256]]], 30], [[], 10]]
    findings, error = timed_checks.launch_findings(checked, none)
    assert error is None and findings[0].check == "timed_work"
    assert "10 of 40 timed calls launched no kernel" in findings[0].detail
    smaller_grid = [[[["softmax_kernel", [1]]], 40]]
    assert timed_checks.launch_findings(checked, smaller_grid)[0][0].check == "timed_work"
    assert timed_checks.launch_findings(checked, [[[["k", [True]]], 1]])[1] is not None
    assert timed_checks.launch_findings(checked, "x")[1] is not None


def test_the_physical_limit_is_the_output_write_at_the_datasheet_peak():
    peak = timed_checks.dram_peak_bytes_per_s("NVIDIA H200")
    # a time under the bound means writing faster than the datasheet
    assert peak / timed_checks.PHYSICAL_MARGIN > 4.8e12
    limit = timed_checks.physical_limit_ms(int(peak / 1e3), 60 << 20, peak)  # 1 ms of writes
    assert abs(limit - 1.0) < 1e-9
    assert timed_checks.physical_findings(0.9, limit, int(peak / 1e3), "x") == []
    assert timed_checks.physical_findings(0.5, limit, int(peak / 1e3), "x")[0].check == "below_physical_limit"
    in_l2 = timed_checks.physical_limit_ms(48_000_000, 60 << 20, 4.8e12)
    assert abs(in_l2 - 0.01 / timed_checks.L2_WRITE_FACTOR) < 1e-9
    assert timed_checks.physical_limit_ms(1000, 1 << 20, timed_checks.dram_peak_bytes_per_s("cpu")) is None


def test_the_isolated_reading_must_show_the_checked_kernels_on_the_gpu():
    sig = timed_checks.signature([["softmax_kernel", [256]]])
    assert sig is not None
    checked = {sig}
    assert timed_checks.isolated_findings(checked, {"softmax_kernel": 0.01}) == []
    assert timed_checks.isolated_findings(checked, {"triton_softmax_kernel_0d1d": 0.01}) == []  # decorated name
    found = timed_checks.isolated_findings(checked, {"Memcpy DtoD (Device -> Device)": 0.01})
    assert [f.check for f in found] == ["timed_work"] and "softmax_kernel" in found[0].detail


def test_a_fresh_set_carries_the_seed_its_contents_came_from():
    audit = timed_audit.TimedCallAudit(fresh, [11, 12], rng=random.Random(0))
    seed, inputs = audit.fresh_set()
    assert seed == 12 and torch.equal(inputs[0], fresh(12)[0])
    audit.keep(seed, inputs[0].softmax(-1), "isolated call 1")
    assert judge(audit) == ([], None)


def test_audited_outputs_use_the_trials_rules_a_zeros_cheat_on_tiny_outputs_fails():
    """Outputs all below atol: compared with atol scaled by max|ref| (compare_outputs), as in the trials."""
    def tiny(seed: int):
        return reference(seed) * 1e-6

    honest = timed_audit.TimedCallAudit(fresh, [4], rng=random.Random(0))
    honest.keep(4, tiny(4), "timed call 1")
    assert timed_checks.check_in_process(honest, tiny, 1e-4, 1e-4) is None
    zeros = timed_audit.TimedCallAudit(fresh, [4], rng=random.Random(0))
    zeros.keep(4, torch.zeros(4, 8), "timed call 1")
    said = timed_checks.check_in_process(zeros, tiny, 1e-4, 1e-4)
    assert said is not None and "behaves differently while timed" in said


def test_with_the_audit_seeds_used_up_nothing_is_kept_and_nothing_fails():
    audit = timed_audit.TimedCallAudit(fresh, [], rng=random.Random(0))
    seed, inputs = audit.fresh_set()
    assert seed is None and inputs
    audit.keep(seed, inputs[0].softmax(-1), "isolated call 1")
    audit.refill_sets([fresh(1)])
    audit.keep_graph({0: torch.zeros(4, 8)}, "graph replay")
    assert audit.kept == [] and judge(audit) == ([], None)


def test_a_sample_spans_every_column_of_a_large_output(monkeypatch):
    monkeypatch.setattr(timed_audit, "FULL_LEAF_BYTES", 64)
    monkeypatch.setattr(timed_audit, "SAMPLE_ELEMENTS", 64)
    out = torch.arange(1024 * 16, dtype=torch.float32).reshape(1024,
                                                               16)  # rows of 16: a stride of 16 would see one column
    for seed in range(20):
        audit = timed_audit.TimedCallAudit(fresh, [seed], rng=random.Random(seed))
        audit.keep(seed, out, "timed call 1")
        calls, flat = audit.wire_values()
        leaf = calls[0]["leaves"][0]
        assert leaf["stride"] % 2 == 1  # coprime with 16 and 1024
        columns = {int(v) % 16 for v in flat[0]}
        assert len(columns) == 16


def test_the_judges_receive_limit_covers_what_keep_ships_at_every_leaf_size():
    """A 1024 x 4096 fp32 output (16 MiB, kept whole) once counted as a 4 MiB sample in the judge's limit: 7 kept
    calls of an honest GEMM went over it and the verify read integrity_violation (runner_protocol) on the H200."""
    audit = timed_audit.TimedCallAudit(fresh, list(range(100)), random.Random(0))
    for numel, dtype in ((1 << 20, torch.float32), (1 << 22, torch.float32), ((1 << 22) + 1, torch.float32),
                         (3 << 22, torch.float16), (5 << 22, torch.float64), (1 << 18, torch.complex128)):
        leaf = torch.zeros(numel, dtype=dtype)
        audit.kept.clear()
        audit.keep(1, leaf, "test")
        _, flat = audit.wire_values()
        shipped = sum(v.numel() * v.element_size() for v in flat)
        assert shipped <= timed_audit.kept_bytes(numel * leaf.element_size()), (numel, dtype, shipped)
