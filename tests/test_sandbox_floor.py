"""The sandbox floor (issue 28, item 1): a server whose sandbox syscalls fail refuses to run candidates, says
what is missing and how to opt in knowingly; with the unsafe opt-in it runs them and every result's text says
the weak level.

The failing host is simulated with a real seccomp filter: the child process (the server and, inherited, its
workers and runners) installs one through prctl(PR_SET_SECCOMP) with ctypes before importing egg_mcp, making
the Landlock syscalls fail with ENOSYS and unshare(2) with EPERM, as on a kernel without Landlock whose user
namespaces are off. Nothing in egg_mcp is patched: its host probe, the runner's confine and the launcher meet
the failing syscalls themselves.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap

import pytest

from egg_mcp.config import UNSAFE_VAR
from egg_mcp.sandbox.floor import UNSAFE_FLAG, floor_for
from egg_mcp.sandbox.report import SandboxReport
from tests.conftest import FIXTURES, REPO

ARCH = {"x86_64": (0xC000003E, 272), "aarch64": (0xC00000B7, 97)}.get(platform.machine())

_CHILD = textwrap.dedent("""
    import ctypes, errno, json, sys

    AUDIT_ARCH, SYS_UNSHARE = int(sys.argv[3]), int(sys.argv[4])

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    LD, JEQ, RET = 0x20, 0x15, 0x06
    ALLOW, ERRNO = 0x7FFF0000, 0x00050000
    insns = [(LD, 0, 0, 4), (JEQ, 0, 5, AUDIT_ARCH), (LD, 0, 0, 0),
             (JEQ, 4, 0, 444), (JEQ, 3, 0, 445), (JEQ, 2, 0, 446), (JEQ, 2, 0, SYS_UNSHARE),
             (RET, 0, 0, ALLOW), (RET, 0, 0, ERRNO | errno.ENOSYS), (RET, 0, 0, ERRNO | errno.EPERM)]
    arr = (Filter * len(insns))(*[Filter(*i) for i in insns])
    libc = ctypes.CDLL(None, use_errno=True)
    args = [ctypes.c_ulong(0)] * 3
    assert libc.prctl(38, ctypes.c_ulong(1), *args) == 0  # PR_SET_NO_NEW_PRIVS
    prog = Prog(len(insns), arr)
    assert libc.prctl(22, ctypes.c_ulong(2), ctypes.byref(prog), ctypes.c_ulong(0), ctypes.c_ulong(0)) == 0, \\
        ctypes.get_errno()  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER

    import anyio
    from mcp import Client
    from egg_mcp.cli import sandbox_banner
    from egg_mcp.config import ServerConfig
    from egg_mcp.sandbox import probe
    from egg_mcp.server import create_server

    unsafe = sys.argv[2] or None
    config = ServerConfig(workspace=sys.argv[1], force_interpreter=True, unsafe_sandbox_floor=unsafe)
    out = {"probe": probe().model_dump(), "banner": sandbox_banner(config)}

    async def main():
        async with Client(create_server(config)) as client:
            r = await client.call_tool("start_task", {"reference": "softmax"})
            tid = r.structured_content["task_id"]
            v = await client.call_tool("verify", {"task_id": tid, "source": sys.stdin.read()})
            out["verify_error"] = v.is_error
            out["verify_text"] = v.content[0].text
            out["verify"] = v.structured_content
            s = await client.call_tool("task_status", {"task_id": tid})
            out["status_text"] = s.content[0].text
            out["status"] = s.structured_content

    anyio.run(main)
    print(json.dumps(out))
""")


def _serve_under_seccomp(tmp_path, unsafe: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != UNSAFE_VAR}
    env["PYTHONPATH"] = str(REPO)
    source = (FIXTURES / "softmax" / "row_per_program.py").read_text()
    assert ARCH is not None  # (skipped on other machines)
    done = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "ws"), unsafe, *map(str, ARCH)],
                          input=source, capture_output=True, text=True, timeout=400, cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


needs_seccomp = pytest.mark.skipif(sys.platform != "linux" or ARCH is None,
                                   reason="the seccomp simulation needs Linux on x86_64 or aarch64")


@needs_seccomp
@pytest.mark.slow
def test_server_without_landlock_or_namespaces_refuses_candidates_then_runs_them_when_opted_in(tmp_path):
    """Landlock and unshare fail under a seccomp filter. Default floor: serve's banner and verify's error say
    what is missing and name the unsafe flag, and no candidate runs. With the opt-in: the candidate runs, its
    runner's report says level env, and the weak level leads the text of verify and of every other tool."""
    refused = _serve_under_seccomp(tmp_path / "default", "")
    assert refused["probe"]["landlock_abi"] is None and not refused["probe"]["pid_namespace"], refused["probe"]
    assert "candidates do not run" in refused["banner"] and UNSAFE_FLAG in refused["banner"]
    assert refused["verify_error"] is True, refused["verify_text"]
    text = refused["verify_text"]
    assert "Landlock filesystem rules" in text and "user + PID namespaces" in text, text
    assert f"{UNSAFE_FLAG} env" in text and "doctor" in text, text
    assert refused["status"]["candidates_in_stage"] == []  # refused before a candidate row or a worker

    opted = _serve_under_seccomp(tmp_path / "unsafe", "env")
    assert "WEAK level env" in opted["banner"], opted["banner"]
    assert opted["verify_error"] is False, opted["verify_text"]
    assert opted["verify"]["verdict"] == "correct", opted["verify_text"]
    assert opted["verify"]["result"]["sandbox"]["level"] == "env", opted["verify"]["result"]["sandbox"]
    for key in ("verify_text", "status_text"):
        assert opted[key].startswith("sandbox: WEAK level env"), opted[key]
        assert "the workspace included" in opted[key]


def test_floor_holds_for_any_missing_layer():
    """Default floor: every layer the host offers and at least the essential ones; a host missing any one of
    them refuses; an opt-in lowers the floor to its level, never below what that level names."""
    full = SandboxReport(level="landlock+ns", env_allowlist=True, no_new_privs=True, capabilities_dropped=True,
                         fs_confined=True, network_confined=True, signals_scoped=True, pid_namespace=True,
                         landlock_abi=7)
    assert floor_for(full).runs_candidates and not floor_for(full).weak
    for layer in ("env_allowlist", "no_new_privs", "capabilities_dropped", "fs_confined", "pid_namespace"):
        floor = floor_for(full.model_copy(update={layer: False}))
        assert not floor.runs_candidates and floor.missing == [layer], (layer, floor)
    old_kernel = full.model_copy(update={"signals_scoped": False, "network_confined": False, "landlock_abi": 3})
    assert floor_for(old_kernel).runs_candidates  # what this kernel offers is the floor
    assert "network_confined" not in floor_for(old_kernel).required
    no_ns = full.model_copy(update={"pid_namespace": False, "level": "landlock"})
    assert floor_for(no_ns, "landlock").runs_candidates and floor_for(no_ns, "landlock").weak == ["pid_namespace"]
    no_fs = full.model_copy(update={"fs_confined": False, "pid_namespace": False, "level": "env"})
    assert not floor_for(no_fs, "landlock").runs_candidates  # the opted-in level still has to be there
    assert floor_for(no_fs, "env").runs_candidates and "fs_confined" in floor_for(no_fs, "env").weak


@pytest.mark.slow
def test_judge_refuses_a_runner_below_the_floor(tmp_path):
    """The floor is checked again on each runner's own report, by the judge, before the candidate is sent: an
    engine told to require a layer no runner reports gets a harness fault naming it, and the candidate never
    ran (its module would have written a file on import)."""
    import anyio
    from mcp import Client

    from egg_mcp.config import ServerConfig
    from egg_mcp.evaluation.engine import WorkerEvaluator
    from egg_mcp.sandbox.floor import below_floor
    from egg_mcp.server import create_server
    from tests.mcp_driver import call

    assert below_floor({"level": "landlock", "fs_confined": True}, ["fs_confined", "pid_namespace"]) is not None
    assert below_floor({"level": "env"}, []) is None
    marker = tmp_path / "imported"
    source = (FIXTURES / "softmax" / "row_per_program.py").read_text() + (
        f"\nopen({str(marker)!r}, 'w').write('ran')\n")

    async def main():
        engine = WorkerEvaluator(scratch_dir=tmp_path / "scratch", force_interpreter=True, spare_workers=0,
                                 sandbox_required=["fs_confined", "made_up_layer"])
        config = ServerConfig(workspace=tmp_path / "ws", force_interpreter=True)
        async with Client(create_server(config, evaluator=engine)) as client:
            started = await call(client, "start_task", reference="softmax")
            return await call(client, "verify", task_id=started["task_id"], source=source)

    out = anyio.run(main)
    assert out["result"]["fault"] == "harness", out["summary"]
    assert "made_up_layer" in out["result"]["error"]["message"] and "floor" in out["result"]["error"]["message"]
    assert not marker.exists()
