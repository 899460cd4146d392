"""The runner's clock on Triton compiles (egg_mcp/evaluation/compile_clock.py): chains, counts, and the
judge's bounded reading of it."""

from __future__ import annotations

import time

import pytest

from egg_mcp.evaluation.compile_clock import CompileClock, reported_compile_s

knobs = pytest.importorskip("triton").knobs


@pytest.fixture
def restore_hooks():
    runtime = knobs.runtime
    saved = runtime.jit_cache_hook, runtime.jit_post_compile_hook
    yield runtime
    runtime.jit_cache_hook, runtime.jit_post_compile_hook = saved


def test_times_each_compile_and_keeps_hooks_set_before_it(restore_hooks):
    runtime = restore_hooks
    seen = []
    runtime.jit_cache_hook = lambda **kw: seen.append("before") or False
    runtime.jit_post_compile_hook = lambda **kw: seen.append("after")
    clock = CompileClock()
    assert clock.install()
    for _ in range(2):
        assert not runtime.jit_cache_hook(key="k")  # falsy: Triton goes on and compiles
        time.sleep(0.02)
        runtime.jit_post_compile_hook(key="k")
    assert seen == ["before", "after", "before", "after"]
    report = clock.report()
    assert report["triton_compiles"] == 2 and 0.04 <= report["triton_compile_s"] < 1.0


def test_a_post_hook_without_a_start_counts_nothing(restore_hooks):
    runtime = restore_hooks
    runtime.jit_cache_hook = runtime.jit_post_compile_hook = None
    clock = CompileClock()
    clock.install()
    runtime.jit_post_compile_hook(key="k")
    assert clock.report() == {"triton_compile_s": 0.0, "triton_compiles": 0}


@pytest.mark.parametrize("value,expected", [(2.71828, 2.7183), (0, 0.0), (-1, None), (1e9, None), (True, None),
                                            ("3", None), (None, None), (float("nan"), None)])
def test_the_judge_reads_only_a_plain_bounded_number(value, expected):
    assert reported_compile_s({"triton_compile_s": value}) == expected
