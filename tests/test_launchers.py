"""Launcher stubs built ahead in waiting spares (egg_mcp/evaluation/launchers.py): what passes as a type list,
how the judge learns and hands them on, and how a runner handles the hint (only before any code is loaded)."""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest

from egg_mcp.evaluation import launchers, runner_loop, runner_process, wire
from egg_mcp.evaluation.compile_clock import CompileClock

GEMM = ["*fp32", "*fp32", "*fp32", "i32", "i32", "i32", "i32", "constexpr", "i32", "constexpr", "i32", "constexpr",
        "constexpr", "constexpr", "constexpr", "constexpr"]


def test_only_flat_lists_of_triton_type_names_pass():
    raw = [GEMM, GEMM, ["*bf16", "i64", "fp32", "*kfp16", "u8", "i1"],
           ["*fp32", "i32; system('x')"], ["tensordesc<fp32[64, 64]>"], [["*fp32", "i32"]], "*fp32", [],
           ["*fp32"] * (launchers.MAX_TYPES + 1), [1, 2], None]
    assert launchers.valid_signatures(raw) == [tuple(GEMM), ("*bf16", "i64", "fp32", "*kfp16", "u8", "i1")]
    assert launchers.valid_signatures({"a": GEMM}) == [] and launchers.valid_signatures("x") == []
    many = [["*fp32"] * n for n in range(1, 30)]
    assert len(launchers.valid_signatures(many)) == launchers.MAX_SIGNATURES


def test_signature_of_a_compile_skips_tuples_and_descriptors():
    assert launchers.signature_of({"signature": {"x": "*fp32", "n": "i32", "B": "constexpr"}}) == \
        ["*fp32", "i32", "constexpr"]
    assert launchers.signature_of({"signature": {"t": ("*fp32", "*fp32"), "n": "i32"}}) is None
    assert launchers.signature_of({"signature": {"d": "tensordesc<fp32[64]>"}}) is None
    assert launchers.signature_of(None) is None and launchers.signature_of({"signature": []}) is None


def test_the_judge_learns_new_lists_and_keeps_the_newest():
    known = launchers.KnownSignatures()
    assert known.learn([GEMM]) == [tuple(GEMM)]
    assert known.learn([GEMM, ["junk type"]]) == []
    for n in range(1, 12):
        known.learn([["i32"] * n])
    assert len(known.items) == launchers.MAX_SIGNATURES and known.items[-1] == ("i32",) * 11
    assert tuple(GEMM) not in known.items  # the oldest went


def test_prebuild_builds_each_valid_list_and_reports_failures_as_data():
    built = []
    report = launchers.prebuild([GEMM, ["bad type"], ["*fp16", "i32"]], builder=built.append)
    assert built == [GEMM, ["*fp16", "i32"]]
    assert report["launchers"] == "ok" and report["launchers_built"] == 2 and report["launcher_build_s"] >= 0

    def broken(types):
        raise OSError("gcc: not found")

    report = launchers.prebuild([GEMM], builder=broken)
    assert report["launchers_built"] == 0 and report["launchers"].startswith("failed: OSError: gcc")


def test_the_triton_builder_makes_the_stub_the_launch_would(monkeypatch):
    """Triton 3.6's make_launcher(constants, signature, tensordesc_meta) + compile_module_from_src, named as
    CudaLauncher names it: faked here (no CUDA), the call shape is what the GPU probe checks for real."""
    triton = pytest.importorskip("triton")
    nv = pytest.importorskip("triton.backends.nvidia.driver")
    import triton.runtime.build as build

    calls = []

    def make_launcher(constants, signature, tensordesc_meta):
        return "src:" + ",".join(signature[i] for i in sorted(signature))

    monkeypatch.setattr(nv, "make_launcher", make_launcher, raising=False)
    monkeypatch.setattr(nv, "library_dirs", lambda: ["/lib"], raising=False)
    monkeypatch.setattr(build, "compile_module_from_src", lambda **kw: calls.append(kw), raising=False)
    report = launchers.prebuild([["*fp32", "i32"]])
    assert report["launchers"] == "ok" and report["launchers_built"] == 1
    assert calls[0]["src"] == "src:*fp32,i32" and calls[0]["name"] == "__triton_launcher"
    assert triton is not None


def test_a_triton_without_per_signature_stubs_builds_nothing(monkeypatch):
    nv = pytest.importorskip("triton.backends.nvidia.driver")
    monkeypatch.delattr(nv, "make_launcher", raising=False)
    report = launchers.prebuild([GEMM])
    assert report == {"launchers": "not needed: this Triton builds no per-signature launcher", "launchers_built": 0,
                      "launcher_build_s": 0.0}


def test_the_runners_compile_hook_reports_each_signature_once():
    knobs = pytest.importorskip("triton").knobs
    runtime = knobs.runtime
    saved = runtime.jit_cache_hook, runtime.jit_post_compile_hook
    try:
        runtime.jit_cache_hook = runtime.jit_post_compile_hook = None
        clock = CompileClock()
        clock.install()
        for sig in ({"a": "*fp32", "n": "i32"}, {"a": "*fp32", "n": "i32"}, {"t": ("*fp32",)}):
            runtime.jit_cache_hook(key="k", compile={"signature": sig})
            runtime.jit_post_compile_hook(key="k")
        report = clock.report()
        assert report["kernel_signatures"] == [["*fp32", "i32"]] and report["triton_compiles"] == 3
    finally:
        runtime.jit_cache_hook, runtime.jit_post_compile_hook = saved


class _Spare:
    def __init__(self):
        self.told = []

    def tell_launchers(self, sigs):
        self.told.append(list(sigs))


def test_new_lists_go_to_every_waiting_spare_once(monkeypatch):
    monkeypatch.setattr(runner_process, "_known_launchers", launchers.KnownSignatures())
    spares = [_Spare(), _Spare()]
    monkeypatch.setattr(runner_process, "spares", lambda: spares)
    assert runner_process.teach_launchers([GEMM, ["no such type"]]) == 1
    assert runner_process.teach_launchers([GEMM]) == 0  # known: nobody is told twice
    assert all(s.told == [[tuple(GEMM)]] for s in spares)


def test_a_new_spare_is_told_everything_known(monkeypatch):
    monkeypatch.setattr(runner_process, "_known_launchers", launchers.KnownSignatures())
    runner_process._known_launchers.learn([GEMM])
    made = []

    class _Proc(_Spare):
        def __init__(self, mode, workdir):
            super().__init__()
            self.mode, self.proc = mode, type("P", (), {"poll": staticmethod(lambda: None)})()
            made.append(self)

    monkeypatch.setattr(runner_process, "RunnerProcess", _Proc)
    monkeypatch.setattr(runner_process, "_prestarted", [])
    runner_process.prestart("gpu", depth=2)
    assert len(made) == 2 and all(m.told == [[tuple(GEMM)]] for m in made)


def test_tell_launchers_sends_one_message_a_gpu_runner_reads(tmp_path):
    ours, theirs = socket.socketpair()
    runner = runner_process.RunnerProcess.__new__(runner_process.RunnerProcess)
    runner.mode, runner.sock = "gpu", ours
    runner.tell_launchers([tuple(GEMM)])
    message, _ = wire.recv(theirs, max_blob_bytes=0, timeout_s=5)
    assert message["type"] == "launchers" and message["signatures"] == [GEMM]
    runner.mode = "interp"
    runner.tell_launchers([tuple(GEMM)])  # the interpreter has no launcher: nothing is sent
    theirs.settimeout(0.2)
    with pytest.raises(socket.timeout):
        theirs.recv(1)
    ours.close(), theirs.close()


@pytest.mark.parametrize("loaded,interpreter,builds", [(False, False, True), (True, False, False), (False, True,
                                                                                                    False)])
def test_a_runner_builds_only_before_any_code_is_loaded_and_never_answers(monkeypatch, loaded, interpreter, builds):
    asked = []
    monkeypatch.setattr(launchers, "prebuild", lambda raw: asked.append(raw) or {
        "launchers": "ok", "launchers_built": 1, "launcher_build_s": 0.2})
    side: Any = type("Side", (), {name: None for name in ("confine", "load", "calls", "report", "guard", "time")})()
    side.loaded, side.interpreter, side.launcher_reports = loaded, interpreter, []
    judge_end, runner_end = socket.socketpair()
    worker = threading.Thread(target=runner_loop.serve, args=(runner_end, side))
    worker.start()
    wire.send(judge_end, {"type": "launchers", "signatures": [GEMM]})
    wire.send(judge_end, {"type": "exit"})
    worker.join(timeout=10)
    assert not worker.is_alive()
    judge_end.settimeout(0.2)
    with pytest.raises((socket.timeout, OSError)):
        if not judge_end.recv(1):  # closed without a word is fine too
            raise OSError("closed")
    assert (asked == [[GEMM]]) is builds and (len(side.launcher_reports) == 1) is builds
    judge_end.close(), runner_end.close()


def test_the_judge_reads_a_bounded_report():
    assert launchers.reported({"launchers": "ok", "launchers_built": 2, "launcher_build_s": 0.41}) == \
        {"launchers": "ok", "built": 2, "build_s": 0.41}
    assert launchers.reported({"launchers": "x" * 999, "launchers_built": -1, "launcher_build_s": "fast"}) == \
        {"launchers": "x" * 200, "built": None, "build_s": None}
    assert launchers.reported({}) is None
    assert launchers.merge([]) == {}
    assert launchers.merge([{"launchers": "ok", "launchers_built": 1, "launcher_build_s": 0.2}] * 2) == \
        {"launchers": "ok", "launchers_built": 2, "launcher_build_s": 0.4}


def test_a_child_a_spare_starts_during_the_kill_walk_is_not_killed(monkeypatch):
    """A spare runs gcc for a launcher stub at any time; the judge's kill of a finished job's processes walks
    its own descendants and the spares' subtrees: a gcc started between the two walks must survive."""
    spare = type("S", (), {"proc": type("P", (), {"pid": 100, "poll": staticmethod(lambda: None)})()})()
    monkeypatch.setattr(runner_process, "spares", lambda: [spare])
    tree = {"judge": [100, 200], 100: []}  # 200: a candidate's leftover process

    walks = []

    def descendants(pid):
        out = list(tree[100] if pid == 100 else tree["judge"])
        walks.append(pid)
        if len(walks) == 1:  # the spare starts gcc (pid 300) between the first walk and the second
            tree[100].append(300)
            tree["judge"].append(300)
        return out

    killed = []
    monkeypatch.setattr(runner_process.confinement, "descendants", descendants)
    monkeypatch.setattr(runner_process.os, "kill", lambda pid, sig: killed.append(pid))
    runner_process.kill_all_but_spare()
    assert 200 in killed and 300 not in killed and 100 not in killed
