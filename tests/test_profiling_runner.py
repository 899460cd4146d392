"""profile_candidate with a fake evaluator: the ncu path, the retries, the fallbacks, ncu discovery."""

import asyncio
import os
import stat
from pathlib import Path

import pytest

from egg_mcp.contract import ErrorReport, EvalOptions, JobOutcome
from egg_mcp.hardware import GPU_TABLE
from egg_mcp.problems.builtin import builtin_source
from egg_mcp.profiling import classify, ncu_command
from egg_mcp.profiling.metrics import metrics_for_stage
from egg_mcp.profiling.ncu_command import find_ncu, kernel_filter, ncu_argv, triton_kernel_names
from egg_mcp.profiling.ncu_csv import render_raw_csv
from egg_mcp.profiling.profile_job import ProfileError, profile_candidate
from egg_mcp.profiling.report_build import aggregate_launches, build_ncu_report
from egg_mcp.stages import Stage

H200 = GPU_TABLE["H200"]
ROOT = Path(__file__).resolve().parents[1]
SOFTMAX_CANDIDATE = (ROOT / "tests/fixtures/softmax/row_per_program.py").read_text()
SOFTMAX_REFERENCE = builtin_source("softmax")

TARGET_RESULT = {
    "kernels": [{"name": "softmax_row_kernel", "launches_per_forward": 1, "grid": [4096, 1, 1], "event_ms": 0.07,
                 "registers": 40, "spills": 0, "shared_mem_bytes": 64, "num_warps": 8, "num_stages": 3}],
    "forward_event_ms": 0.08,
    "device": {"name": "NVIDIA H200", "sm_count": 132},
    "interpreter": False,
    "profiled": True,
    "warnings": [],
}


def softmax_log(duration_ns: float = 70_000) -> str:
    nbytes = 4096 * 8192 * 4
    return "==PROF== Connected to process 1\n" + render_raw_csv(
        [{"ID": 0, "Kernel Name": "softmax_row_kernel", "gpu__time_duration.sum": duration_ns,
          "sm__throughput.avg.pct_of_peak_sustained_elapsed": 20.0,
          "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": 88.0,
          "dram__bytes_read.sum": nbytes, "dram__bytes_write.sum": nbytes, "launch__grid_size": 4096}],
        units={"gpu__time_duration.sum": "nsecond", "dram__bytes_read.sum": "byte", "dram__bytes_write.sum": "byte",
               "sm__throughput.avg.pct_of_peak_sustained_elapsed": "%"},
    ) + "==PROF== Disconnected from process 1\n"


class FakeEvaluator:
    """Answers run_job from a list of scripted steps; each step may write the ncu log."""

    def __init__(self, steps, has_gpu=True):
        self.steps = list(steps)
        self.calls = []
        self._has_gpu = has_gpu

    def has_gpu(self):
        return self._has_gpu

    async def run_job(self, target, payload, *, timeout_s, uses_gpu, wrapper_argv=None):
        self.calls.append({"target": target, "payload": payload, "uses_gpu": uses_gpu, "wrapper_argv": wrapper_argv})
        log_text, outcome = self.steps.pop(0)
        if wrapper_argv and log_text is not None:
            Path(wrapper_argv[wrapper_argv.index("--log-file") + 1]).write_text(log_text)
        return outcome


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    path = tmp_path / "ncu"
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("EGG_MCP_NCU", str(path))
    return str(path)


def profile(evaluator, stage=Stage.MEMORY, **kwargs):
    nbytes = 2 * 4096 * 8192 * 4
    return asyncio.run(profile_candidate(
        evaluator, reference_source=SOFTMAX_REFERENCE, candidate_source=SOFTMAX_CANDIDATE,
        options=kwargs.pop("options", EvalOptions()),
        stage=stage, gpu=kwargs.pop("gpu", H200), flops=kwargs.pop("flops", 5.0 * 4096 * 8192),
        min_bytes=kwargs.pop("min_bytes", nbytes), **kwargs,
    ))


def test_ncu_path_builds_the_command_and_the_report(fake_ncu):
    ev = FakeEvaluator([(softmax_log(), JobOutcome(ok=True, result=TARGET_RESULT, wall_s=7.5))])
    messages = []

    async def progress(done, total, message):
        messages.append(message)

    report = profile(ev, progress=progress)
    call = ev.calls[0]
    argv = call["wrapper_argv"]
    assert call["target"] == "egg_mcp.profiling.target:run_forward" and call["uses_gpu"]
    assert argv[0] == fake_ncu and argv[-1] == "--"
    assert argv[argv.index("-k") + 1] == "regex:^(softmax_row_kernel)"
    assert argv[argv.index("--profile-from-start") + 1] == "off"
    assert argv[argv.index("--clock-control") + 1] == "none"
    assert call["payload"]["profile"] is True and call["payload"]["device"] == "cuda"
    assert report.source == "ncu" and report.ncu_command == argv and report.ncu_wall_s == 7.5
    (k,) = report.kernels
    assert k.name == "softmax_row_kernel" and k.time_share == 1.0
    assert k.classification.bound == "memory-bound"
    assert {m.source for m in k.metrics} == {"ncu", "triton_metadata", "event_timing"}
    assert k.metric(classify.TRITON_REGS).value == 40
    assert "ncu" in report.sources and report.roofline.bound_by == "memory"
    assert messages[0].startswith("profiling: starting") and messages[-1] == "profiling: done"


SANDBOX = {"level": "landlock", "env_allowlist": True, "landlock_abi": 7, "fs_confined": True,
           "signals_scoped": True, "network_confined": True, "no_new_privs": True, "wrapped_by": "ncu",
           "tcp_ports_allowed": [49152, 49153], "notes": []}


def test_the_report_states_the_sandbox_the_profiled_worker_ran_in(fake_ncu):
    report = profile(FakeEvaluator([(softmax_log(), JobOutcome(ok=True, result=TARGET_RESULT, sandbox=SANDBOX))]))
    assert report.sandbox.startswith("landlock; Landlock ABI 7") and report.sandbox.endswith("wrapped by ncu")
    from egg_mcp.profiling.compact import compact_report

    assert compact_report(report, "egg://x").sandbox.startswith("landlock")
    # ncu's injection broken under the sandbox: the fallback says so, with the level
    broken = profile(FakeEvaluator([("==PROF== Connected to process 1\n", JobOutcome(ok=True, result=TARGET_RESULT,
                                                                                       sandbox=SANDBOX))]))
    assert broken.fallback_reason is not None
    assert broken.source == "fallback" and "under the job's sandbox (landlock" in broken.fallback_reason
    assert broken.sandbox.startswith("landlock")


def test_counter_permission_error_falls_back_without_a_second_job(fake_ncu):
    log = ("==PROF== Connected to process 1\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access "
           "NVIDIA GPU Performance Counters on the target device 0.\n")
    ev = FakeEvaluator([(log, JobOutcome(ok=True, result=TARGET_RESULT))])
    report = profile(ev)
    assert len(ev.calls) == 1
    assert report.fallback_reason is not None
    assert report.source == "fallback" and "ERR_NVGPUCTRPERM" in report.fallback_reason
    (k,) = report.kernels
    sources = {m.name: m.source for m in k.metrics}
    assert sources[classify.EVENT_DURATION] == "event_timing"
    assert sources[classify.TRITON_REGS] == "triton_metadata"
    assert sources["computed.theoretical_occupancy"] == "computed"
    assert k.occupancy.blocks_per_sm == 6  # 40 regs: 1280/warp -> 51 warps -> 6 blocks of 8 warps
    assert k.occupancy.limiter == "registers"
    assert set(report.sources) >= {"event_timing", "triton_metadata", "computed"}


def test_rejected_metric_is_dropped_and_retried(fake_ncu):
    bad = metrics_for_stage(Stage.TILING)[-1]
    first = f"==ERROR== Failed to find metric {bad}\n"
    ev = FakeEvaluator([(first, JobOutcome(ok=False, exit_code=1)),
                        (softmax_log(), JobOutcome(ok=True, result=TARGET_RESULT))])
    report = profile(ev, stage=Stage.TILING)
    assert len(ev.calls) == 2
    second_metrics = ev.calls[1]["wrapper_argv"][ev.calls[1]["wrapper_argv"].index("--metrics") + 1].split(",")
    assert bad not in second_metrics and len(second_metrics) > 10
    assert report.source == "ncu" and report.metrics_rejected == [bad]
    assert any(bad in w for w in report.warnings)


def test_unmatched_kernel_names_are_retried_with_the_launched_names(fake_ncu):
    renamed = dict(TARGET_RESULT, kernels=[dict(TARGET_RESULT["kernels"][0], name="softmax_row_kernel_0d1d")])
    ev = FakeEvaluator([("==WARNING== No kernels were profiled.\n", JobOutcome(ok=True, result=renamed)),
                        (softmax_log(), JobOutcome(ok=True, result=renamed))])
    report = profile(ev)
    argv = ev.calls[1]["wrapper_argv"]
    assert argv[argv.index("-k") + 1] == "regex:^(softmax_row_kernel_0d1d)"
    assert report.source == "ncu"


def test_candidate_failure_and_timeout_raise_clear_errors(fake_ncu):
    err = ErrorReport(kind="IndexError", message="out of range", candidate_line=17)
    with pytest.raises(ProfileError, match="candidate line 17.*Run verify on it first"):
        profile(FakeEvaluator([(None, JobOutcome(ok=False, error=err))]))
    with pytest.raises(ProfileError, match="timed out after 60 s"):
        profile(FakeEvaluator([(None, JobOutcome(ok=False, timed_out=True))]), timeout_s=60)


def test_missing_ncu_runs_the_target_without_a_wrapper(monkeypatch):
    monkeypatch.setattr(ncu_command, "find_ncu", lambda env=None: None)
    ev = FakeEvaluator([(None, JobOutcome(ok=True, result=TARGET_RESULT))])
    report = profile(ev)
    assert ev.calls[0]["wrapper_argv"] is None and ev.calls[0]["payload"]["profile"] is False
    assert ev.calls[0]["payload"]["timing_iters"] > 0
    assert report.source == "fallback" and report.fallback_reason.startswith("ncu not found")
    assert report.kernels[0].duration_ms == pytest.approx(0.07)


def test_cpu_without_size_overrides_explains_and_keeps_the_roofline():
    ev = FakeEvaluator([], has_gpu=False)
    report = profile(ev)
    assert ev.calls == [] and report.source == "fallback" and report.fallback_reason == "no GPU"
    assert report.kernels == [] and report.roofline is not None
    # the hint names an argument profile_ncu really has (issue 15: it pointed at one that did not exist)
    assert any("nothing was run or measured" in w and "profile_ncu again with size_overrides" in w
               for w in report.warnings)
    assert "the candidate was not run" in report.summary
    assert "no kernel information" in report.summary


async def _with_engine(call):
    """The real engine (WorkerEvaluator) in interpreter mode, closed afterwards."""
    import tempfile
    from pathlib import Path

    from egg_mcp.evaluation.engine import WorkerEvaluator

    ev = WorkerEvaluator(scratch_dir=Path(tempfile.mkdtemp(prefix="egg-prof-test-")), force_interpreter=True,
                         spare_workers=0)
    try:
        return await call(ev)
    finally:
        await ev.aclose()


def test_cpu_fallback_runs_the_interpreter_in_a_real_worker():
    """The real target in a real subprocess on the CPU interpreter (what CI can run)."""
    options = EvalOptions(size_overrides={"batch_size": 8, "dim": 100}, device="interpreter")
    report = asyncio.run(_with_engine(lambda ev: profile_candidate(
        ev, reference_source=SOFTMAX_REFERENCE, candidate_source=SOFTMAX_CANDIDATE,
        options=options, stage=Stage.PARALLEL_MAPPING, gpu=H200, flops=None, min_bytes=None, timeout_s=120,
    )))
    assert report.source == "fallback"
    (k,) = report.kernels
    assert k.name == "softmax_row_kernel"
    assert k.metric(classify.GRID_BLOCKS).value == 8
    assert k.duration_ms is None
    assert any("reduced sizes" in w for w in report.warnings)
    # 8 programs on 132 SMs: the mapping advice fires even without counters (grid of the reduced size)
    assert k.next_moves and k.next_moves[0].startswith("grid 8 blocks < 132 SMs")


def test_find_ncu_order(tmp_path):
    def exe(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
        return str(path)

    on_path = exe(tmp_path / "bin" / "ncu")
    explicit = exe(tmp_path / "custom" / "ncu")
    assert find_ncu({"PATH": str(tmp_path / "bin"), "EGG_MCP_NCU": explicit}) == explicit
    assert find_ncu({"PATH": str(tmp_path / "bin")}) == on_path
    not_exec = tmp_path / "other" / "ncu"
    not_exec.parent.mkdir()
    not_exec.write_text("")
    expected_default = next((p for p in ["/usr/local/cuda/bin/ncu"] if os.access(p, os.X_OK)), None)
    result = find_ncu({"PATH": str(tmp_path / "other"), "EGG_MCP_NCU": str(not_exec)})
    assert result != str(not_exec)
    if expected_default is None and not list(Path("/opt/nvidia").glob("nsight-compute/*/ncu")):
        assert result is None


def test_kernel_names_from_source_without_running_it():
    src = '''
import triton
import triton.language as tl
from triton import jit

@triton.autotune(configs=[], key=["n"])
@triton.jit
def tuned(x_ptr, n): pass

@jit
def plain(x_ptr): pass

def helper(): pass
'''
    assert triton_kernel_names(src) == ["tuned", "plain"]
    assert triton_kernel_names("def broken(:") == []
    assert kernel_filter(["a_b", "c.d"]) == r"regex:^(a_b|c\.d)"
    assert kernel_filter([]) == "regex:.*"
    argv = ncu_argv("/x/ncu", ["m1", "m2"], "regex:.*", "/tmp/log.csv")
    assert argv[:3] == ["/x/ncu", "--csv", "--page"] and argv[argv.index("--metrics") + 1] == "m1,m2"


def test_aggregate_launches_sums_counts_and_weights_rates():
    from egg_mcp.profiling.ncu_csv import parse_raw_page

    text = render_raw_csv([
        {"ID": 0, "Kernel Name": "k", "gpu__time_duration.sum": 1000, "dram__bytes_read.sum": 10,
         "sm__throughput.avg.pct_of_peak_sustained_elapsed": 10, "launch__grid_size": 4},
        {"ID": 1, "Kernel Name": "k", "gpu__time_duration.sum": 3000, "dram__bytes_read.sum": 30,
         "sm__throughput.avg.pct_of_peak_sustained_elapsed": 50, "launch__grid_size": 8},
        {"ID": 2, "Kernel Name": "other", "gpu__time_duration.sum": 500},
    ])
    agg = aggregate_launches(parse_raw_page(text))
    count, k = agg["k"]
    assert count == 2
    assert k["gpu__time_duration.sum"][0] == 4000
    assert k["dram__bytes_read.sum"][0] == 40
    assert k["sm__throughput.avg.pct_of_peak_sustained_elapsed"][0] == pytest.approx(40.0)
    assert k["launch__grid_size"][0] == 8
    assert agg["other"][0] == 1


def test_several_kernels_are_reported_with_shares():
    text = render_raw_csv([
        {"ID": 0, "Kernel Name": "a", "gpu__time_duration.sum": 30_000,
         "sm__throughput.avg.pct_of_peak_sustained_elapsed": 85},
        {"ID": 1, "Kernel Name": "b", "gpu__time_duration.sum": 10_000,
         "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": 80},
    ])
    report = build_ncu_report(text, stage=Stage.TILING, gpu=H200, flops=1e9, min_bytes=1e8)
    assert [k.name for k in report.kernels] == ["a", "b"]
    assert [k.time_share for k in report.kernels] == [0.75, 0.25]
    assert report.kernels[0].classification.bound == "compute-bound"
    assert report.kernels[1].classification.bound == "memory-bound"
    # the task's floor is not split across kernels
    assert all("floor" not in k.classification.headline for k in report.kernels)
    assert report.roofline.measured_ms == pytest.approx(0.04)
    with pytest.raises(ValueError, match="no profiled launch"):
        build_ncu_report("==ERROR== boom\n", stage=Stage.TILING, gpu=H200)


def test_candidate_without_modelnew_fails_with_a_clear_error():
    options = EvalOptions(size_overrides={"batch_size": 8, "dim": 100}, device="interpreter")
    with pytest.raises(ProfileError, match="defines no `class ModelNew`"):
        asyncio.run(_with_engine(lambda ev: profile_candidate(
            ev, reference_source=SOFTMAX_REFERENCE, candidate_source="import torch\n",
            options=options, stage=Stage.TILING, gpu=H200, timeout_s=120,
        )))


def test_fp32_at_a_loose_tolerance_uses_the_tf32_roof_like_the_task_analysis(fake_ncu):
    """The profiler and analyze_problem must quote the same compute roof for the same task."""
    from egg_mcp.contract import LOOSE

    strict = profile(FakeEvaluator([(softmax_log(), JobOutcome(ok=True, result=TARGET_RESULT))]))
    loose = profile(FakeEvaluator([(softmax_log(), JobOutcome(ok=True, result=TARGET_RESULT))]),
                    options=EvalOptions(tolerance=LOOSE))
    assert strict.roofline.compute_type == "fp32"
    assert loose.roofline.compute_type == "tf32"
