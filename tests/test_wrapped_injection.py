"""ncu's injection under the job sandbox (issue 12, found on the H200): `ncu` in /usr/local/cuda/bin launches
/opt/nvidia/nsight-compute/<v>, whose injection libraries (LD_PRELOAD) the Landlock rules did not cover, so a
confined profiling worker died with "Failed to profile" / exit code 11 and profile_ncu blamed the candidate.
Now the wrapped process may read the injected libraries' install tree, and if ncu's injection still fails
the profile falls back to the confined no-counter path with the reason, never a candidate failure."""

from __future__ import annotations

import asyncio

from egg_mcp.contract import ErrorReport, EvalOptions, JobOutcome
from egg_mcp.evaluation.tool_confine import injection_roots
from egg_mcp.profiling.profile_job import ncu_injection_failure, profile_candidate
from egg_mcp.stages import Stage
from tests.test_profiling_runner import (  # noqa: F401  (fake_ncu is a fixture)
    H200,
    SOFTMAX_CANDIDATE,
    SOFTMAX_REFERENCE,
    TARGET_RESULT,
    FakeEvaluator,
    fake_ncu,
)

LD_ERROR = ("ERROR: ld.so: object '/opt/nvidia/nsight-compute/2025.3.1/target/linux-desktop-glibc_2_11_3-x64/./"
            "libcuda-injection.so' from LD_PRELOAD cannot be preloaded (cannot open shared object file): ignored.")


def test_injection_roots_grant_the_tools_tree_not_the_top_or_the_jobs_dir(tmp_path):
    tree = tmp_path / "opt" / "nvidia" / "nsight-compute" / "2025.3.1"
    lib_dir = tree / "target" / "linux-desktop-glibc_2_11_3-x64"
    lib_dir.mkdir(parents=True)
    (lib_dir / "libcuda-injection.so").write_bytes(b"")
    home = tmp_path / "home"
    job = home / "user" / "job"
    job.mkdir(parents=True)
    (home / "evil.so").write_bytes(b"")  # its dir holds the job's dir: granting it would expose the job
    env = {"LD_PRELOAD": f"{lib_dir}/./libcuda-injection.so:{home}/evil.so /libtop.so",
           "CUDA_INJECTION64_PATH": str(lib_dir / "libcuda-injection.so")}
    assert injection_roots(env, avoid=[str(job)], maps_text="") == [str(tree)]
    assert injection_roots({}, avoid=[], maps_text="") == []
    assert injection_roots({"LD_PRELOAD": "relative/lib.so"}, maps_text="") == []


def test_ncu_injection_failure_is_told_apart_from_a_candidate_crash(tmp_path):
    died = ErrorReport(kind="exit", message="worker exited with code 11 in phase 'load' before the harness reported")
    log = tmp_path / "ncu.csv"
    log.write_text('==PROF== Connected to process 496\n==ERROR== Failed to profile "softmax_kernel" in process 496\n')
    said = ncu_injection_failure(JobOutcome(ok=False, error=died, exit_code=11), log)
    assert said is not None and "Failed to profile" in said
    said = ncu_injection_failure(JobOutcome(ok=False, error=died, stderr_tail=LD_ERROR), tmp_path / "none.csv")
    assert said is not None and "cannot be preloaded" in said
    crash = ErrorReport(kind="IndexError", message="out of range", candidate_line=17)
    assert ncu_injection_failure(JobOutcome(ok=False, error=crash, stderr_tail="Traceback ..."),
                                 tmp_path / "none.csv") is None


def test_profile_falls_back_without_counters_when_ncu_fails_under_the_sandbox(fake_ncu):  # noqa: F811 - the fixture
    died = ErrorReport(kind="exit", message="worker exited with code 11 in phase 'load' before the harness reported")
    sandbox = {"level": "landlock", "fs_confined": True, "wrapped_by": "ncu"}
    ev = FakeEvaluator([
        ('==ERROR== Failed to profile "softmax_row_kernel" in process 1\n',
         JobOutcome(ok=False, error=died, exit_code=11, stderr_tail=LD_ERROR, sandbox=sandbox)),
        (None, JobOutcome(ok=True, result=TARGET_RESULT, sandbox=sandbox)),
    ])
    report = asyncio.run(profile_candidate(
        ev, reference_source=SOFTMAX_REFERENCE, candidate_source=SOFTMAX_CANDIDATE, options=EvalOptions(),  # pyright: ignore[reportArgumentType]  # a fake Evaluator
        stage=Stage.MEMORY, gpu=H200, flops=5.0 * 4096 * 8192, min_bytes=2 * 4096 * 8192 * 4))
    assert ev.calls[0]["wrapper_argv"] and ev.calls[1]["wrapper_argv"] is None  # the second run is not wrapped
    assert report.source == "fallback"
    assert report.fallback_reason.startswith("ncu could not profile under the job's sandbox")
    assert report.fallback_reason is not None
    assert "Failed to profile" in report.fallback_reason and "without counters" in report.fallback_reason
    assert report.kernels and report.kernels[0].duration_ms > 0


def test_injection_libraries_mapped_into_the_process_count_even_when_the_environment_names_none(tmp_path):
    # ncu 2025.3.1 on the H200: its preload library had removed LD_PRELOAD before Python started
    lib = (tmp_path / "nsight-compute" / "2025.3.1" / "target" / "linux-desktop-glibc_2_11_3-x64"
           / "libcuda-injection.so")
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"")
    other = tmp_path / "lib" / "libtorch_cuda.so"
    maps = (f"7f00-7f10 r-xp 00000000 08:01 123 {lib}\n7f10-7f20 r--p 00000000 08:01 9 {other}\n"
            "7f20-7f30 rw-p 00000000 00:00 0 \n7f30-7f40 r--p 00000000 00:00 0 [vdso]\n")
    from egg_mcp.evaluation.tool_confine import mapped_injections

    assert mapped_injections(maps) == [str(lib)]
    assert injection_roots({}, avoid=[], maps_text=maps) == [str(tmp_path / "nsight-compute" / "2025.3.1")]
    job = tmp_path / "nsight-compute" / "2025.3.1" / "jobs" / "1"
    assert injection_roots({}, avoid=[str(job)], maps_text=maps) == []  # never a tree holding the job
    assert isinstance(mapped_injections(), list)  # this process's own maps: readable, and nothing injected here
