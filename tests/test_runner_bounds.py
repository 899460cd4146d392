"""Per-job resource bounds of the runner (egg_mcp/evaluation/bounds.py): memory, file size, processes, scratch.

The end-to-end cases run real candidates in the Triton interpreter on the CPU with small floors (so a bound is
reached in MiB, not GiB): each over-bound candidate gets a verdict whose message names the bound, the engine
keeps serving (an honest candidate evaluated after them with the same bounds is correct), and no runner
process is left behind.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from egg_mcp.contract import EvalOptions
from egg_mcp.evaluation import bounds
from egg_mcp.evaluation.engine import WorkerEvaluator
from egg_mcp.problems.builtin import builtin_source
from egg_mcp.sandbox import spawn_prefix

MIB = 2**20
QUICK: dict[str, int | list[int]] = {"batch_size": 8, "dim": 100}
# small floors: bounds are reached fast; 1.5 GiB of memory still holds a runner that imported torch and Triton
FLOOR = {"memory_bytes": 1536 * MIB, "file_bytes": 4 * MIB, "scratch_bytes": 24 * MIB, "tasks": 96}

KERNEL = '''
import os, time
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, x_stride, y_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(y_ptr + row * y_stride + cols, num / tl.sum(num, axis=0), mask=mask)


def softmax(x):
    y = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]))
    return y

'''


def candidate(forward_body: str) -> str:
    body = textwrap.indent(textwrap.dedent(forward_body).strip(), " " * 8)
    return KERNEL + f"\nclass ModelNew(nn.Module):\n    def forward(self, x):\n{body}\n        return softmax(x)\n"


CANDIDATES = {
    # one file past RLIMIT_FSIZE: Python gets EFBIG (it ignores SIGXFSZ)
    "big_file": candidate("""
        with open("big.bin", "wb") as f:
            for _ in range(16):
                f.write(b"x" * (1 << 20))
    """),
    # the same with SIGXFSZ's default action restored: the runner dies of the signal
    "file_signal": candidate("""
        import signal
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        with open("big.bin", "wb") as f:
            for _ in range(16):
                f.write(b"x" * (1 << 20))
                f.flush()
    """),
    # one allocation past RLIMIT_DATA
    "big_allocation": candidate("""
        hog = bytearray(3 << 30)
    """),
    # children each under RLIMIT_DATA, together over the bound: the watchdog sees the tree's resident memory
    "children_memory": candidate("""
        kids = []
        for _ in range(3):
            pid = os.fork()
            if pid == 0:
                hog = bytearray(700 << 20)
                for i in range(0, len(hog), 4096):
                    hog[i] = 1
                time.sleep(60)
                os._exit(0)
            kids.append(pid)
        time.sleep(30)
    """),
    # a fork burst past the task bound
    "fork_burst": candidate("""
        for _ in range(200):
            if os.fork() == 0:
                os.execv("/bin/sleep", ["sleep", "61.4242"])
        time.sleep(30)
    """),
    # many files each under the file-size bound, together past the scratch bound
    "scratch_fill": candidate("""
        os.makedirs("fill", exist_ok=True)
        for i in range(16):
            with open(f"fill/{i}.bin", "wb") as f:
                f.write(os.urandom(3 << 20))
        time.sleep(30)
    """),
    # honest work under the same bounds (run last: the engine still serves after the others)
    "honest": candidate(""),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    async def run_all():
        evaluator = WorkerEvaluator(scratch_dir=tmp_path_factory.mktemp("bounds"), force_interpreter=True,
                                    spare_workers=0, bounds_floor=FLOOR)
        try:
            options = EvalOptions(size_overrides=QUICK, correctness_trials=2, run_timeout_s=120.0)
            reference = builtin_source("softmax")
            bad = [n for n in CANDIDATES if n != "honest"]
            outs = await asyncio.gather(*[evaluator.evaluate(reference, CANDIDATES[n], options) for n in bad])
            honest = await evaluator.evaluate(reference, CANDIDATES["honest"], options)
            return {**dict(zip(bad, outs)), "honest": honest}
        finally:
            await evaluator.aclose()

    return asyncio.run(run_all())


LAUNCHER = str(Path(bounds.__file__).resolve().parent.parent / "sandbox" / "launch.py").encode()


def _with_cmdline(cmdline: bytes) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if Path(f"/proc/{name}/cmdline").read_bytes() == cmdline:
                    out.append(int(name))
            except OSError:
                continue
    return out


def _runner_pids() -> list[int]:
    """Runners of this checkout left running (through its namespace launcher: other checkouts' servers may run
    runners on this machine at the same time)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                cmd = Path(f"/proc/{name}/cmdline").read_bytes()
            except OSError:
                continue
            if LAUNCHER in cmd and b"egg_mcp.evaluation.runner" in cmd:
                out.append(int(name))
    return out


@pytest.mark.slow
def test_a_write_past_the_file_size_bound_is_named(results):
    r = results["big_file"]
    assert r.verdict == "runtime_error" and r.fault == "candidate", (r.summary, r.error)
    assert r.error.kind == "resource_limit"
    assert "file-size bound (4 MiB, RLIMIT_FSIZE)" in r.error.message and "RLIMIT_FSIZE" in r.summary


@pytest.mark.slow
def test_a_runner_killed_by_sigxfsz_is_named_not_a_crash(results):
    r = results["file_signal"]
    assert r.verdict == "runtime_error" and r.fault == "candidate", (r.summary, r.error)
    assert r.error.kind == "resource_limit" and "SIGXFSZ" in r.error.message
    assert "file-size bound (4 MiB, RLIMIT_FSIZE)" in r.error.message and "Stay within the runner's bounds" in r.summary


@pytest.mark.slow
def test_an_allocation_past_the_memory_bound_is_oom(results):
    r = results["big_allocation"]
    assert r.verdict == "oom", (r.summary, r.error)
    data = bounds.data_limit(bounds.derive(0, floor=FLOOR))
    assert f"memory bound ({bounds.size(data)}, RLIMIT_DATA)" in r.error.message


@pytest.mark.slow
def test_children_over_the_memory_bound_together_are_killed_as_oom(results):
    r = results["children_memory"]
    assert r.verdict == "oom", (r.summary, r.error)
    assert "over its bound of 1.5 GiB" in r.error.message and "killed" in r.summary


@pytest.mark.slow
def test_a_fork_burst_past_the_task_bound_is_named(results):
    r = results["fork_burst"]
    assert r.verdict == "runtime_error", (r.summary, r.error)
    assert r.error.kind == "resource_limit"
    assert "over its bound of 96" in r.error.message or "RLIMIT_NPROC" in r.error.message
    assert _with_cmdline(b"sleep\x0061.4242\x00") == []  # the burst died with the runner


@pytest.mark.slow
def test_many_small_files_past_the_scratch_bound_are_named(results):
    r = results["scratch_fill"]
    assert r.verdict == "runtime_error", (r.summary, r.error)
    assert r.error.kind == "resource_limit"
    assert "scratch dir, over its bound of 24 MiB" in r.error.message


@pytest.mark.slow
def test_honest_work_fits_and_the_engine_still_serves(results):
    r = results["honest"]
    assert r.verdict == "correct", (r.summary, r.error)
    assert r.sandbox["rlimits"]["file_bytes"] == FLOOR["file_bytes"]
    assert r.sandbox["rlimits"]["data_bytes"] >= FLOOR["memory_bytes"]
    assert "memory 1.5 GiB" in r.judge["bounds"]
    peak = r.judge["runner_peak"]  # an interpreter runner: some hundred MiB, a few tasks
    assert peak.startswith("memory ") and "MiB" in peak and " 0 tasks" not in peak
    if spawn_prefix() and not os.environ.get("PYTEST_XDIST_WORKER"):  # (another module's runners meanwhile)
        assert _runner_pids() == []


# ---------------------------------------------------------------------------- units


def test_bounds_grow_with_the_footprint_above_their_floors():
    small, big = bounds.derive(0, cpu_count=2), bounds.derive(8 * 2**30, cpu_count=2)
    assert (small.memory_bytes, small.file_bytes, small.scratch_bytes) == (
        bounds.MEMORY_FLOOR, bounds.FILE_FLOOR, bounds.SCRATCH_FLOOR)
    assert small.tasks == bounds.TASKS_FLOOR and bounds.derive(0, cpu_count=128).tasks == 64 + 4 * 128
    assert big.memory_bytes == bounds.MEMORY_FLOOR + bounds.MEMORY_FACTOR * 8 * 2**30
    assert big.file_bytes == 8 * 2**30 and big.scratch_bytes == 16 * 2**30
    assert bounds.derive(0, floor={"tasks": 10}).tasks == 10


def test_a_jobs_bounds_take_its_floors_and_grow_with_the_hosts_cores():
    """The judges' one path (verify's, memcheck's): the payload's floors; a task floor it does not set grows with
    the cores (it stayed at 256 on a 128-core host when the judge passed the filled-in floors)."""
    assert bounds.for_job(0, {"bounds_floor": {}}, cpu_count=128).tasks == 64 + 4 * 128
    assert bounds.for_job(0, {}, cpu_count=128) == bounds.derive(0, cpu_count=128)
    job = bounds.for_job(2**30, {"bounds_floor": {"memory_bytes": 2**30, "tasks": 96}}, cpu_count=128)
    assert job.tasks == 96 and job.memory_bytes == 2**30 + bounds.MEMORY_FACTOR * 2**30


def test_bounds_from_the_wire_are_validated():
    good = bounds.derive(123)
    assert bounds.Bounds.from_wire(good.to_wire()) == good
    for raw in (None, [], {}, {**good.to_wire(), "tasks": 0}, {**good.to_wire(), "memory_bytes": "x"}):
        assert bounds.Bounds.from_wire(raw) is None
    assert bounds.floors({"tasks": True, "file_bytes": -1, "memory_bytes": 5, "other": 9})["memory_bytes"] == 5
    assert bounds.floors({"tasks": True})["tasks"] == bounds.TASKS_FLOOR


def test_footprint_counts_inputs_at_the_task_dtype_and_parameters():
    import torch

    class Module:
        @staticmethod
        def get_inputs():
            return [torch.randn(1000, 1000), torch.arange(10), 3]

    model = torch.nn.Linear(100, 10)
    got = bounds.footprint_of(Module, model, "cpu", torch.float16)
    assert got == 1000 * 1000 * 2 + 10 * 8 + (100 * 10 + 10) * 4


REFERENCE = """
import torch
import torch.nn as nn

batch_size = 4


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.scale = SCALE

    def forward(self, x):
        return self.lin(x) * self.scale


def get_inputs():
    return [torch.randn(batch_size, 64)]


def get_init_inputs():
    return [64]
"""


def test_the_footprint_of_a_reference_a_judge_did_not_load(tmp_path):
    """memcheck's judge holds no reference model: the reference is built on the meta device (no memory), or for
    real where its constructor needs values (`.item()` fails on meta); the same bytes either way, the job's sizes
    applied; a reference that does not load gives 0 (the floor applies)."""
    opts = EvalOptions(size_overrides={"batch_size": 8}).model_dump(mode="json")
    want = 8 * 64 * 4 + (64 * 64 + 64) * 4
    meta = bounds.reference_footprint(REFERENCE.replace("SCALE", "2.0"), opts, 1, "cpu", tmp_path / "a")
    real = bounds.reference_footprint(REFERENCE.replace("SCALE", "torch.ones(1).sum().item()"), opts, 1, "cpu",
                                      tmp_path / "b")
    assert meta == real == want
    assert bounds.reference_footprint("raise ValueError('broken')", opts, 1, "cpu", tmp_path / "c") == 0


def test_rlimits_in_a_runner_like_child_name_the_bound(tmp_path):
    """In a child (rlimits are per process): the file bound turns a write into EFBIG that names it, the data
    bound a big allocation into MemoryError that names it; RLIMIT_NPROC is left alone without a user namespace."""
    script = textwrap.dedent(f"""
        import json, os, errno
        from egg_mcp.evaluation import bounds
        b = bounds.Bounds(memory_bytes=2 << 30, file_bytes=1 << 20, scratch_bytes=8 << 20, tasks=64)
        done = bounds.apply_rlimits(b, interpreter=True, namespaces=None)
        out = {{"done": done}}
        try:
            with open({str(tmp_path / 'f.bin')!r}, "wb") as f:
                f.write(b"x" * (2 << 20))
        except OSError as exc:
            out["file"] = [exc.errno, bounds.over_bound_note(exc)]
        try:
            bytearray(3 << 30)
        except MemoryError as exc:
            out["memory"] = bounds.over_bound_note(exc)
        import torch
        try:
            torch.empty(3 << 30, dtype=torch.uint8)
        except RuntimeError as exc:
            out["torch"] = bounds.over_bound_note(exc)
        print(json.dumps(out))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    data = bounds.data_limit(bounds.Bounds(memory_bytes=2 << 30, file_bytes=1 << 20, scratch_bytes=8 << 20, tasks=64))
    assert out["done"]["file_bytes"] == 1 << 20 and out["done"]["data_bytes"] == data > 2 << 30
    assert out["done"]["nproc"] is None and any("RLIMIT_NPROC" in n for n in out["done"]["not"])
    assert out["file"][0] == errno.EFBIG and out["file"][1][0] == "resource_limit"
    assert "1 MiB, RLIMIT_FSIZE" in out["file"][1][1]
    assert out["memory"][0] == "oom" and f"{bounds.size(data)}, RLIMIT_DATA" in out["memory"][1]
    assert out["torch"][0] == "oom"  # torch's CPU allocator raises RuntimeError, not MemoryError
    assert os.path.getsize(tmp_path / "f.bin") <= 1 << 20


def test_gpu_runners_get_no_address_space_or_data_limit(tmp_path):
    script = textwrap.dedent("""
        import json, resource
        from egg_mcp.evaluation import bounds
        done = bounds.apply_rlimits(bounds.derive(0), interpreter=False, namespaces="user,pid,mount")
        print(json.dumps([done, resource.getrlimit(resource.RLIMIT_AS), resource.getrlimit(resource.RLIMIT_DATA)]))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr
    applied, as_limit, data_limit = json.loads(done.stdout.strip().splitlines()[-1])
    assert applied["data_bytes"] is None and any("CUDA" in n for n in applied["not"])
    assert as_limit[0] == -1 and data_limit[0] == -1  # RLIM_INFINITY: left as they were


def test_scratch_and_tree_usage_measure_what_is_there(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(os.urandom(3 * MIB))
    used, entries = bounds.dir_usage(tmp_path)
    assert used >= 3 * MIB and entries == 2
    b = bounds.Bounds(memory_bytes=1 << 40, file_bytes=MIB, scratch_bytes=MIB, tasks=10_000)
    over = bounds.over_bounds(b, [os.getpid()], tmp_path)
    assert over is not None
    kind, message = over
    assert kind == "resource_limit" and "scratch dir" in message
    rss, tasks = bounds.tree_usage([os.getpid()])
    assert rss > 10 * MIB and tasks >= 1
    assert bounds.over_bounds(bounds.Bounds(memory_bytes=MIB, file_bytes=MIB, scratch_bytes=1 << 40, tasks=10_000),
                              [os.getpid()], tmp_path)[0] == "oom"
    assert bounds.over_bounds(bounds.Bounds(memory_bytes=1 << 40, file_bytes=MIB, scratch_bytes=1 << 40, tasks=0),
                              [os.getpid()], None)[0] == "resource_limit"


def test_doctor_says_which_bound_is_in_force_and_which_is_not(monkeypatch, capsys):
    from egg_mcp.doctor import _bounds_lines
    from egg_mcp.sandbox import host

    _bounds_lines()
    out = capsys.readouterr().out
    assert out.startswith("[ok  ] bounds") and "RLIMIT_FSIZE" in out and "no RLIMIT_AS: CUDA" in out
    assert "cgroup v2" in out and "processes:" in out
    assert "memcheck's under compute-sanitizer" in out and "Ray lane" in out
    assert f"{bounds.derive(0).tasks} tasks" in out  # what a judge here derives (bounds.for_job)
    monkeypatch.setattr(host, "_namespaces", lambda: (["user", "pid"], ""))
    monkeypatch.setattr(os, "getuid", lambda: 1000)
    _bounds_lines()
    assert "[ok  ]                        processes: RLIMIT_NPROC in the runner's own user namespace" in \
        capsys.readouterr().out
    monkeypatch.setattr(host, "_namespaces", lambda: ([], "refused"))
    _bounds_lines()
    assert "[warn]                        processes: the judge's watchdog only" in capsys.readouterr().out
    monkeypatch.setattr(os, "getuid", lambda: 0)
    _bounds_lines()
    assert "exempt from RLIMIT_NPROC" in capsys.readouterr().out


def test_a_job_that_runs_code_in_its_worker_gets_the_file_bound(tmp_path):
    """Profiling, tiling, compare and analysis jobs run user code in the worker itself: it is one-job, so the
    file-size bound and no core file are set there (worker._confine_job), and its outcome says so."""
    async def main():
        ev = WorkerEvaluator(scratch_dir=tmp_path / "scratch", force_interpreter=True, spare_workers=0)
        try:
            return await ev.run_job("tests.doubles.jobs:reach", {"write": [str(tmp_path / "scratch" / "x")]},
                                    timeout_s=60, uses_gpu=False)
        finally:
            await ev.aclose()

    outcome = asyncio.run(main())
    assert outcome.ok, outcome.error
    limits = outcome.sandbox["rlimits"]
    assert limits["file_bytes"] == bounds.FILE_FLOOR and limits["core"] == 0 and limits["data_bytes"] is None


NPROC_INNER = r'''
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from egg_mcp.evaluation import bounds
done = bounds.apply_rlimits(bounds.Bounds(memory_bytes=8 << 30, file_bytes=1 << 30, scratch_bytes=1 << 30, tasks=20),
                            interpreter=True, namespaces=sys.argv[-1])
ok, refused, note = 0, 0, None
for _ in range(40):
    try:
        pid = os.fork()
    except BlockingIOError as exc:
        refused += 1
        note = bounds.over_bound_note(exc)
        continue
    if pid == 0:
        time.sleep(5)
        os._exit(0)
    ok += 1
print(json.dumps({"nproc": done["nproc"], "ok": ok, "refused": refused, "note": note}))
'''


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/bin/python3") or not spawn_prefix(),
                    reason="needs root (to run as nobody), a system python and user namespaces")
def test_rlimit_nproc_in_the_runners_user_namespace_counts_only_its_tasks():
    """The reason RLIMIT_NPROC is set only in the runner's own user namespace: there, the same user's 30 other
    processes outside do not count against it (Linux >= 5.14 counts per namespace), the runner's own forks do."""
    root = str(Path(bounds.__file__).resolve().parent.parent.parent)

    def nobody():
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)

    outside = [subprocess.Popen(["sleep", "30"], preexec_fn=nobody) for _ in range(30)]
    try:
        launcher = str(Path(root) / "egg_mcp" / "sandbox" / "launch.py")
        done = subprocess.run(["/usr/bin/python3", "-I", "-S", launcher, "--tell-arg", "--namespaces", "--",
                               "/usr/bin/python3", "-c", NPROC_INNER, root], preexec_fn=nobody, capture_output=True,
                              text=True, timeout=60, cwd="/tmp")
    finally:
        for p in outside:
            p.kill()
            p.wait()
    if done.returncode == 125:
        pytest.skip(f"no user namespace for nobody here: {done.stderr.strip()[-200:]}")
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["nproc"] == 20
    assert 10 <= out["ok"] < 20 and out["refused"] == 40 - out["ok"]  # the 30 outside left room for most of 20
    assert out["note"][0] == "resource_limit" and "(20 tasks, RLIMIT_NPROC)" in out["note"][1]
