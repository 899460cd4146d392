"""The persistent judge (issue 12, latency): a second verify of a task reuses the judge that holds its
reference, a candidate cannot leave state for the next one, a harness fault recycles the judge, the
oneshot/persistent switch works, and every second of a verify is in a phase.

One sequence of verifies through one WorkerEvaluator (CPU interpreter, small shapes), asserted on by
the tests below.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from egg_mcp.contract import EvalOptions
from egg_mcp.evaluation.engine import WorkerEvaluator
from egg_mcp.evaluation.engine_judges import judge_mode_from
from egg_mcp.problems.builtin import builtin_source

pytestmark = pytest.mark.slow

CORRECT = (Path(__file__).parent / "adversarial" / "correct_row_softmax.py").read_text()
QUICK: dict[str, int | list[int]] = {"batch_size": 8, "dim": 100}
MARK = "egg_leak_7c1d"


def with_forward_prefix(body: str) -> str:
    """The correct candidate with `body` run at the start of every forward."""
    lines = "\n".join("        " + line for line in body.strip("\n").splitlines())
    return CORRECT.replace("    def forward(self, x):\n", f"    def forward(self, x):\n{lines}\n", 1)


LEAKER = with_forward_prefix(f"""
import os, sys, builtins, subprocess, tempfile
for path in ("{MARK}", "../{MARK}", "../../{MARK}", os.path.join(tempfile.gettempdir(), "{MARK}"),
             "/tmp/{MARK}", os.path.expanduser("~/{MARK}"), "../tmp/{MARK}"):
    try:
        with open(path, "w") as f:
            f.write("left by the previous candidate")
    except OSError:
        pass
os.environ["{MARK}"] = "1"
builtins.{MARK} = 1
sys.modules["{MARK}"] = sys
torch.{MARK} = 1
if not getattr(builtins, "{MARK}_child", False):
    builtins.{MARK}_child = True
    subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(3); "
                      "open('/tmp/{MARK}', 'w').write('late'); open('../{MARK}', 'w').write('late'); time.sleep(60)"],
                     start_new_session=True)
""")

CHECKER = with_forward_prefix(f"""
import os, sys, builtins, tempfile
seen = [p for p in ("{MARK}", "../{MARK}", "../../{MARK}", os.path.join(tempfile.gettempdir(), "{MARK}"),
                    os.path.expanduser("~/{MARK}"), "../tmp/{MARK}") if os.path.exists(p)]
if (seen or "{MARK}" in os.environ or hasattr(builtins, "{MARK}") or "{MARK}" in sys.modules
        or hasattr(torch, "{MARK}")):
    return torch.zeros_like(x)  # wrong on purpose: the previous candidate's state reached us
""")

# A candidate can write well-formed messages to its runner's socket: here a forged runner-side
# exception while it is imported, which the judge reports as a harness fault (never `correct`): the judge
# must not survive it.
FAULTER = CORRECT + """
import os as _os, socket as _socket, sys as _sys
from egg_mcp.evaluation import wire as _wire
# at import (the judge waits for its 'load' reply): the runner's one socket, found as any process finds its own
def _socket_fd():
    for n in list(_os.listdir("/proc/self/fd")):
        try:
            if _os.readlink(f"/proc/self/fd/{n}").startswith("socket:"):
                return int(n)
        except OSError:  # the listing's own descriptor, closed by now
            pass


_fd = _socket_fd()
_wire.send(_socket.socket(fileno=_os.dup(_fd)), {"type": "runner_error", "kind": "RuntimeError",
                                                 "message": "forged harness failure", "traceback": ""})
_os._exit(0)
"""


def _opts() -> EvalOptions:
    return EvalOptions(size_overrides=QUICK, device="interpreter", correctness_trials=2)


async def _sequence(tmp: Path, judge: str, sources: list[str]) -> list[tuple[object, float]]:
    ev = WorkerEvaluator(scratch_dir=tmp / "scratch", force_interpreter=True, judge=judge)
    reference = builtin_source("softmax")
    out = []
    try:
        await ev.start_pool()
        await ev.wait_pool_ready()
        for source in sources:
            t0 = time.monotonic()
            result = await ev.evaluate(reference, source, _opts())
            out.append((result, time.monotonic() - t0))
    finally:
        await ev.aclose()
    return out


@pytest.fixture(scope="module")
def persistent(tmp_path_factory):
    Path(f"/tmp/{MARK}").unlink(missing_ok=True)
    return asyncio.run(_sequence(tmp_path_factory.mktemp("persistent"), "persistent",
                                 [CORRECT, LEAKER, CHECKER, FAULTER, CORRECT]))


@pytest.fixture(scope="module")
def oneshot(tmp_path_factory):
    return asyncio.run(_sequence(tmp_path_factory.mktemp("oneshot"), "oneshot", [CORRECT, CORRECT]))


def test_a_second_verify_of_the_task_reuses_the_judge_and_its_reference(persistent):
    (first, _), (second, _) = persistent[0], persistent[1]
    assert first.verdict == "correct", first.summary
    # the leaker runs a process from forward: a native_code violation (host_audit.py), after leaving its state
    assert second.verdict == "integrity_violation" and "native_code" in {f.check for f in second.integrity}, (
        second.summary)
    assert first.judge["persistent"] and first.judge["reference"] == "loaded" and first.judge["job"] == 1
    assert second.judge["pid"] == first.judge["pid"] and second.judge["job"] == 2
    assert second.judge["reference"] == "held"
    assert "load_reference" in first.phase_s and "load_reference" not in second.phase_s
    # interpreter runners do no GPU warm-up (runner_warmup.py); the judge says what the runner reported
    assert first.judge["runner_warmup"] == "none" and second.judge["runner_warmup"] == "none"


def test_a_candidate_leaves_no_state_for_the_next_verify(persistent):
    leaker, checker = persistent[1][0], persistent[2][0]
    assert leaker.verdict == "integrity_violation", leaker.summary  # its child process: native_code
    assert checker.judge["pid"] == leaker.judge["pid"]  # same judge: the route under test
    assert checker.verdict == "correct", checker.summary
    assert not Path(f"/tmp/{MARK}").exists() or Path(f"/tmp/{MARK}").read_text() != "late"  # the child died
    if "landlock" in (leaker.sandbox or {}).get("level", ""):  # /tmp itself is closed to a confined runner
        assert not Path(f"/tmp/{MARK}").exists()


def test_a_harness_fault_recycles_the_judge(persistent):
    (checker, _), (faulted, _), (after, _) = persistent[2], persistent[3], persistent[4]
    assert faulted.verdict != "correct" and faulted.fault == "harness", faulted.summary
    assert after.verdict == "correct", after.summary
    assert after.judge["pid"] not in (checker.judge["pid"], faulted.judge["pid"])
    assert after.judge["reference"] == "loaded" and after.judge["job"] == 1


def test_every_second_of_a_verify_is_in_a_phase(persistent):
    for result, wall in persistent:
        phases = result.server_phase_s
        named = sum(v for k, v in phases.items() if k not in ("total", "unaccounted"))
        assert abs(phases["unaccounted"]) < 0.05, phases
        assert abs(phases["total"] - named - phases["unaccounted"]) < 0.01, phases
        assert 0 <= wall - phases["total"] < 0.5, (wall, phases)  # outside the engine: the payload, the result
        if result.phase_s:  # the judge's own phases cover its share of the job
            # never more than the time since the job was handed over: the server marks the judge's "started" when
            # its event loop reads it, tens of ms late under load, so the bound is worker_start + judge
            assert sum(result.phase_s.values()) <= phases["worker_start"] + phases["judge"] + 0.05, (
                result.phase_s, phases)
            assert phases["judge"] - sum(result.phase_s.values()) < 0.5, (result.phase_s, phases)


def test_the_oneshot_path_takes_a_fresh_judge_per_verify(oneshot):
    (a, _), (b, _) = oneshot
    assert a.verdict == b.verdict == "correct", (a.summary, b.summary)
    assert a.judge["persistent"] is False and b.judge["persistent"] is False
    assert a.judge["pid"] != b.judge["pid"]
    assert a.judge["reference"] == b.judge["reference"] == "loaded"
    assert "load_reference" in b.phase_s


def test_the_switch_reads_the_environment_and_refuses_unknown_values(monkeypatch, tmp_path):
    monkeypatch.setenv("EGG_MCP_JUDGE", "oneshot")
    assert WorkerEvaluator(scratch_dir=tmp_path, force_interpreter=True, protect_server_memory=False).judge == "oneshot"
    monkeypatch.delenv("EGG_MCP_JUDGE")
    assert WorkerEvaluator(scratch_dir=tmp_path, force_interpreter=True,
                           protect_server_memory=False).judge == "persistent"
    assert judge_mode_from(" Persistent ") == "persistent"
    with pytest.raises(ValueError, match="oneshot"):
        judge_mode_from("sometimes")


def test_a_judge_is_recycled_after_its_job_limit(tmp_path):
    async def scenario():
        ev = WorkerEvaluator(scratch_dir=tmp_path / "scratch", force_interpreter=True, judge="persistent",
                             judge_max_jobs=1)
        try:
            reference = builtin_source("softmax")
            first = await ev.evaluate(reference, CORRECT, _opts())
            idle_after_first = ev.judges()
            second = await ev.evaluate(reference, CORRECT + "\n# again\n", _opts())
            return first, second, idle_after_first
        finally:
            await ev.aclose()

    first, second, idle = asyncio.run(scenario())
    assert first.verdict == second.verdict == "correct", (first.summary, second.summary)
    assert idle == []  # its one job done: not kept
    assert first.judge["pid"] != second.judge["pid"] and second.judge["reference"] == "loaded"
