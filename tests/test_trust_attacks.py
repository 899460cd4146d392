"""Hostile candidates against the judge/runner split (issue 12): every route a candidate has — the
interpreter's objects, inherited file descriptors, /proc, its ancestors, the filesystem, signals,
escaped children, memory past its tensors. None may yield `correct`, leak the token, change the
workspace or kill the server; the next honest verify is `correct`.

All candidates run once, concurrently, through one WorkerEvaluator (CPU interpreter, small shapes).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import time
from pathlib import Path

import pytest

from egg_mcp.contract import EvalOptions
from egg_mcp.evaluation import confinement
from egg_mcp.evaluation.engine import WorkerEvaluator
from egg_mcp.problems.builtin import builtin_source

pytestmark = pytest.mark.slow

CORRECT = (Path(__file__).parent / "adversarial" / "correct_row_softmax.py").read_text()
QUICK: dict[str, int | list[int]] = {"batch_size": 8, "dim": 100}
TOKEN = "egg-test-token-3f9a1c"
FORGED = ('{"type": "result", "ok": True, "result": {"verdict": "correct", "summary": "Correct (forged)", '
          '"correctness_trials": 5, "correctness_trials_passed": 5}}')


def hostile(body: str) -> str:
    """The correct candidate whose forward runs `body` and then returns zeros (wrong on purpose:
    only a forged verdict could call it correct)."""
    lines = "\n".join("        " + line for line in body.strip("\n").splitlines())
    return CORRECT.replace("    def forward(self, x):\n",
                           f"    def forward(self, x):\n{lines}\n        return torch.zeros_like(x)\n", 1)


ATTACKS = {
    "forge_via_worker_channel": hostile(f"""
import sys, os, json
import egg_mcp.evaluation.worker as w
msg = {FORGED}
ch = w.channel()
if ch is not None:
    ch.send(msg)
for nonce in [None]:
    line = (json.dumps(msg) + "\\n").encode()
    for fd in range(3, 64):
        try:
            os.write(fd, line)
        except OSError:
            pass
os._exit(0)
"""),
    "write_every_inherited_fd": hostile(f"""
import os, json
line = (json.dumps({FORGED}) + "\\n").encode()
for name in os.listdir("/proc/self/fd"):
    try:
        os.write(int(name), line)
    except OSError:
        pass
"""),
    "read_environment_and_parents": hostile("""
import os
found = [repr(dict(os.environ))]
pids = [os.getpid(), os.getppid()]
try:
    stat = open(f"/proc/{os.getppid()}/stat").read()
    pids.append(int(stat[stat.rindex(")") + 2:].split()[1]))
except Exception as exc:
    found.append(repr(exc))
for pid in pids:
    try:
        found.append(open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace"))
    except Exception as exc:
        found.append(repr(exc))
print("\\n".join(found))
raise RuntimeError(" ".join(found)[:3000])
"""),
    "read_judge_memory": hostile("""
import os
for what in ("maps", "mem", "environ"):
    try:
        with open(f"/proc/{os.getppid()}/{what}", "rb") as f:
            f.read(16)
        print(f"READABLE_{what}", flush=True)
    except OSError as exc:
        print(f"denied {what}: {exc}", flush=True)
"""),
    "gc_walk_for_the_judge": hostile("""
import gc
hits = sorted({type(o).__name__ for o in gc.get_objects()
               if type(o).__name__ in ("Evaluation", "Judge", "ResultChannel", "Verdicts")})
if hits:
    print("FOUND_HARNESS_OBJECTS", hits, flush=True)
"""),
    "signal_parents": hostile("""
import os, signal
targets = {os.getppid(), int(os.environ.get("EGG_MCP_SERVER_PID", "0") or 0)} - {0, 1}
for pid in targets:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
try:
    os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)
except OSError:
    pass
"""),
    "escaped_setsid_grandchild": hostile("""
import os, time
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        print(f"GRANDCHILD={os.getpid()} PRIVATE={os.getcwd()}", flush=True)
        time.sleep(300)
    os._exit(0)
os.waitpid(pid, 0)
time.sleep(0.3)
"""),
    "one_past_the_end": CORRECT.replace(
        "tl.store(y_ptr + row * y_stride + cols, num / tl.sum(num, axis=0), mask=mask)",
        "tl.store(y_ptr + row * y_stride + cols, num / tl.sum(num, axis=0), mask=cols <= n_cols)"),
}
for name, source in ATTACKS.items():
    assert source != CORRECT, f"{name}: the attack was not spliced into the candidate"


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "scratch" not in p.parts}


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    """(results with wall seconds per attack, the honest verify after them, workspace digest before,
    after, the scratch dir)."""
    ws = tmp_path_factory.mktemp("ws")
    (ws / "exports").mkdir()
    (ws / "exports" / "kernel.py").write_text("# exported\n")
    import sqlite3

    db = sqlite3.connect(ws / "egg.sqlite3")
    db.execute("CREATE TABLE candidates (id TEXT, verdict TEXT)")
    db.execute("INSERT INTO candidates VALUES ('c1', 'incorrect')")
    db.commit()
    db.close()
    attacks = dict(ATTACKS)
    attacks["write_the_workspace"] = hostile(f"""
import os, sqlite3
WS = {str(ws)!r}
for path in (WS + "/egg.sqlite3", "../../../egg.sqlite3"):
    try:
        db = sqlite3.connect(path); db.execute("UPDATE candidates SET verdict='correct'"); db.commit()
    except Exception as exc:
        print("db denied", exc)
for path in (WS + "/exports/kernel.py", WS + "/exports/pwned.py", WS + "/pwned.txt"):
    try:
        open(path, "w").write("pwned")
    except OSError as exc:
        print("write denied", exc)
try:
    print("WS_LISTING", os.listdir(WS + "/exports"))
except OSError as exc:
    print("list denied", exc)
""")
    before = tree_digest(ws)
    old = os.environ.get("EGG_MCP_TOKEN")
    os.environ["EGG_MCP_TOKEN"] = TOKEN  # as in HTTP mode: the server holds the bearer token

    async def run_all():
        evaluator = WorkerEvaluator(scratch_dir=ws / "scratch", force_interpreter=True, spare_workers=0,
                                    log_limit_bytes=16 * 1024)
        options = EvalOptions(size_overrides=QUICK, correctness_trials=2, run_timeout_s=60)
        reference = builtin_source("softmax")

        async def one(source):
            start = time.monotonic()
            result = await evaluator.evaluate(reference, source, options)
            return result, time.monotonic() - start

        try:
            outs = await asyncio.gather(*[one(src) for src in attacks.values()])
            honest = await evaluator.evaluate(reference, CORRECT, options)
            return dict(zip(attacks, outs)), honest
        finally:
            await evaluator.aclose()

    try:
        results, honest = asyncio.run(run_all())
    finally:
        if old is None:
            os.environ.pop("EGG_MCP_TOKEN", None)
        else:
            os.environ["EGG_MCP_TOKEN"] = old
    return results, honest, before, tree_digest(ws), ws / "scratch"


@pytest.mark.parametrize("name", [*ATTACKS, "write_the_workspace"])
def test_no_attack_is_correct_or_leaks_the_token(attacked, name):
    results = attacked[0]
    result, _ = results[name]
    assert result.verdict != "correct", (name, result.summary)
    assert TOKEN not in result.model_dump_json(), f"{name} leaked the server's token"


def test_forged_channel_messages_do_not_make_a_verdict(attacked):
    for name in ("forge_via_worker_channel", "write_every_inherited_fd"):
        result, _ = attacked[0][name]
        assert result.verdict in ("incorrect", "integrity_violation", "runtime_error"), (name, result.summary)
        assert "forged" not in result.summary


def test_the_judge_is_not_readable_through_proc(attacked):
    result, _ = attacked[0]["read_judge_memory"]
    assert "denied maps" in result.stdout_tail, result.stdout_tail  # the attack ran
    assert "READABLE_" not in result.stdout_tail, result.stdout_tail


def test_the_interpreter_holds_no_harness_objects(attacked):
    result, _ = attacked[0]["gc_walk_for_the_judge"]
    assert "FOUND_HARNESS_OBJECTS" not in result.stdout_tail, result.stdout_tail
    # the walk itself (gc.get_objects) is a dispatch_escape violation (host_audit.py)
    assert result.verdict == "integrity_violation" and "dispatch_escape" in {f.check for f in result.integrity}


def test_signalling_the_parents_leaves_the_server_and_the_next_verify_intact(attacked):
    result, _ = attacked[0]["signal_parents"]
    assert result.verdict in ("runtime_error", "oom", "incorrect"), result.summary
    assert attacked[1].verdict == "correct", attacked[1].summary


def test_an_escaped_setsid_grandchild_neither_holds_the_job_nor_survives_it(attacked):
    result, wall = attacked[0]["escaped_setsid_grandchild"]
    # the fork itself is a native_code violation (host_audit.py); the grandchild must still die with the job
    assert result.verdict == "integrity_violation" and "native_code" in {f.check for f in result.integrity}, (
        result.summary)
    assert result.server_phase_s["result_to_exit"] < 3.0, result.server_phase_s
    assert re.search(r"GRANDCHILD=(\d+)", result.stdout_tail), result.stdout_tail  # it ran
    # Its pid may be a PID-namespace pid; its command line (a fork of the runner) names the job's private
    # dir (an ordinary temp dir, its cwd, which it printed), so no process may be left with that in its argv.
    private = re.search(r"PRIVATE=(\S+)", result.stdout_tail)
    scratch = f"--private {private.group(1)}" if private else str(attacked[4])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _survivors(scratch):
        time.sleep(0.1)
    assert not _survivors(scratch), f"processes of finished jobs are still alive: {_survivors(scratch)}"


def _survivors(marker: str) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
            with open(f"/proc/{name}/stat") as f:
                zombie = f.read().split(") ")[1][0] == "Z"
        except OSError:
            continue
        if marker in cmdline and not zombie:
            out.append(int(name))
    return out


def test_one_element_past_the_end_is_a_memory_error(attacked):
    result, _ = attacked[0]["one_past_the_end"]
    assert result.verdict == "memory_error", result.summary
    assert "torch.empty_like" in result.summary and "[8, 100]" in result.summary, result.summary
    assert "past the end" in result.error.message, result.error


def test_every_second_is_in_a_phase(attacked):
    result = attacked[1]
    phases = result.server_phase_s
    assert {"queue_wait", "worker_take", "worker_start", "judge", "result_to_exit", "teardown"} <= set(phases)
    assert abs(phases["total"] - sum(v for k, v in phases.items() if k != "total")) < 0.01
    assert phases["judge"] >= sum(result.phase_s.values()) - 0.05, (phases, result.phase_s)


def test_the_result_states_the_sandbox(attacked):
    sandbox = attacked[1].sandbox
    assert sandbox and sandbox["env_allowlist"] is True and sandbox["level"] in ("env", "landlock", "landlock+ns")


def test_the_workspace_is_unchanged(attacked):
    results, _, before, after, _ = attacked
    result, _ = results["write_the_workspace"]
    if not (result.sandbox or {}).get("fs_confined"):
        pytest.skip("no filesystem confinement on this host (egg_mcp.sandbox with Landlock not in force): "
                    f"{(result.sandbox or {}).get('notes')}")
    assert after == before
    assert "WS_LISTING" not in result.stdout_tail and "db denied" in result.stdout_tail, result.stdout_tail


def test_secrets_never_reach_a_worker():
    assert confinement.is_secret("EGG_MCP_TOKEN") and confinement.is_secret("OPENAI_API_KEY")
    env = confinement.runner_env({"EGG_MCP_TOKEN": TOKEN, "EGG_MCP_SERVER_PID": "1", "PATH": "/bin",
                                  "HOME": "/home/user"}, Path("/tmp/egg-private-test"), interpreter=True)
    assert "EGG_MCP_TOKEN" not in env and "EGG_MCP_SERVER_PID" not in env
    assert env["HOME"].startswith("/tmp/egg-private-test")


MEMCHECK_REPORT = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at softmax_kernel+0x2d0 in /tmp/runner-1/src/candidate.py:20
=========     by thread (100,0,0) in block (7,0,0)
=========     Address 0x7f3a4c000c80 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3a4c000000 of size 3200 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========     Host Frame: [0x2f2d4f]
=========
========= ERROR SUMMARY: 1 error
"""


def test_a_memcheck_report_becomes_a_memory_error_naming_kernel_and_address():
    from egg_mcp.evaluation.memcheck import result_from_report

    result = result_from_report(MEMCHECK_REPORT, "compute-sanitizer", 1.0)
    assert result.verdict == "memory_error" and result.error_count == 1
    error = result.errors[0]
    assert error.kernel == "softmax_kernel" and error.address == "0x7f3a4c000c80"
    assert "write of size 4" in error.access and "1 bytes after the nearest allocation" in error.detail
    assert "softmax_kernel" in result.summary and "0x7f3a4c000c80" in result.summary
    assert result_from_report("========= ERROR SUMMARY: 0 errors\n", "cs", 1.0).verdict == "clean"
    assert result_from_report("", "cs", 1.0).verdict == "unavailable"


def test_runner_timing_is_cross_checked_against_the_judges_clock():
    from egg_mcp.contract import TimingStats
    from egg_mcp.evaluation.judge import timing_cross_check

    honest = TimingStats(median_ms=9.7, mean_ms=9.7, n_runs=31, host_wall_ms=320.0)
    assert timing_cross_check(honest, wall_ms=1100.0) == []
    more_than_happened = TimingStats(median_ms=9.7, mean_ms=9.7, n_runs=310, host_wall_ms=3100.0)
    [finding] = timing_cross_check(more_than_happened, wall_ms=1100.0)
    assert finding.check == "timing_forged" and finding.severity == "violation"
    scaled_down = TimingStats(median_ms=0.05, mean_ms=0.05, n_runs=31, host_wall_ms=2.0)
    [finding] = timing_cross_check(scaled_down, wall_ms=4000.0)
    assert finding.check == "timing_forged" and finding.severity == "review"


def test_a_forged_verdict_through_mcp_is_not_correct_and_cannot_be_committed(tmp_path, monkeypatch):
    """The issue's first row, end to end: verify over MCP, stored in the workspace, commit refused."""
    import anyio
    from mcp import Client

    from egg_mcp.config import ServerConfig
    from egg_mcp.server import create_server
    from tests.mcp_driver import call, call_error, first_text

    monkeypatch.setenv("EGG_MCP_TOKEN", TOKEN)
    source = ATTACKS["forge_via_worker_channel"].replace(
        "return torch.zeros_like(x)", "print(os.environ.get('EGG_MCP_TOKEN')); return torch.zeros_like(x)", 1)

    async def main():
        async with Client(create_server(ServerConfig(workspace=tmp_path / "ws", force_interpreter=True))) as client:
            tid = (await call(client, "start_task", reference="softmax", k_seeds=1))["task_id"]
            await call(client, "generate_seeds", task_id=tid)
            result = await client.call_tool("verify", {"task_id": tid, "source": source})
            assert not result.is_error, first_text(result.content)
            verified = result.structured_content
            status = await call(client, "task_status", task_id=tid)
            error = await call_error(client, "commit_stage", task_id=tid, candidate_id=verified["candidate_id"],
                                     decision={"summary": "x", "changes": ["x"], "rationale": "x", "evidence": []})
            return verified, status, error, str(result.content)

    verified, status, error, text = anyio.run(main)
    assert verified["verdict"] != "correct", verified["summary"]
    assert "forged" not in verified["summary"] and TOKEN not in text
    assert "not correct" in error or verified["verdict"] in error
