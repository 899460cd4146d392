"""ncu on an admin-only driver: which capability an ncu-wrapped process keeps, and the seccomp deny-list
that goes with it (egg_mcp/evaluation/tool_confine.py, egg_mcp/sandbox/seccomp.py)."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap

import pytest

from egg_mcp.evaluation import tool_confine
from egg_mcp.sandbox import seccomp
from egg_mcp.sandbox.report import SandboxReport


def _params(tmp_path, value: str):
    path = tmp_path / "params"
    path.write_text(f"ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: {value}\nEnableMSI: 1\n")
    return str(path)


def test_only_ncu_on_an_admin_only_driver_keeps_cap_sys_admin(tmp_path):
    (tmp_path / "a").mkdir()
    admin, open_ = _params(tmp_path / "a", "1"), _params(tmp_path, "0")
    assert tool_confine.caps_to_keep("/opt/nvidia/nsight-compute/2025.3.1/ncu", {}, admin) == [21]
    assert tool_confine.caps_to_keep("/usr/local/cuda/bin/ncu", {}, open_) == []
    assert tool_confine.caps_to_keep("/usr/local/cuda/bin/compute-sanitizer", {}, admin) == []
    assert tool_confine.caps_to_keep(None, {}, admin) == []
    assert tool_confine.caps_to_keep("ncu", {"EGG_MCP_NCU_ADMIN": "never"}, admin) == []
    assert tool_confine.caps_to_keep("ncu", {}, str(tmp_path / "missing")) == []  # no driver: nothing kept


def test_the_operator_switch_reaches_the_wrapped_process_env():
    assert tool_confine.ipc_env({"EGG_MCP_NCU_ADMIN": "never", "HOME": "/root"}) == {"EGG_MCP_NCU_ADMIN": "never"}


def test_report_names_the_kept_capability():
    report = SandboxReport(level="landlock", capabilities_dropped=True, capabilities_kept=["CAP_SYS_ADMIN"],
                           seccomp_denied=37)
    assert "kept CAP_SYS_ADMIN + seccomp" in report.summary()
    assert "kept" not in SandboxReport(level="landlock", capabilities_dropped=True).summary()


def test_program_jumps_land_on_deny_and_everything_else_is_allowed():
    prog = seccomp.program(["unshare", "bpf", "not-a-syscall"], "x86_64")
    allow, deny = len(prog) - 2, len(prog) - 1
    assert prog[allow][3] == seccomp.SECCOMP_RET_ALLOW and prog[deny][3] & 0xFFFF0000 == seccomp.SECCOMP_RET_ERRNO
    compares = [(i, row) for i, row in enumerate(prog) if row[0] == seccomp.BPF_JEQ_K and i > 1]
    assert sorted(row[3] for _, row in compares) == [272, 321]
    for i, row in compares:
        assert i + 1 + row[1] == deny and row[2] == 0


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.machine() not in seccomp.SYSCALLS,
                    reason="seccomp filters: Linux x86-64 / aarch64")
def test_the_filter_denies_the_listed_calls_in_every_thread_and_nothing_else():
    code = textwrap.dedent('''
        import ctypes, os, threading, time
        from egg_mcp.sandbox import _sys as S, seccomp
        libc = ctypes.CDLL(None, use_errno=True)
        NR = seccomp.SYSCALLS[__import__("platform").machine()]["unshare"]
        before = libc.syscall(NR, 0)
        S.prctl(S.PR_SET_NO_NEW_PRIVS, 1)
        out = {}
        def other():
            time.sleep(0.2)
            out["thread"] = (libc.syscall(NR, 0), ctypes.get_errno())
        t = threading.Thread(target=other); t.start()
        seccomp.deny()
        main = (libc.syscall(NR, 0), ctypes.get_errno())
        t.join()
        print(before, main, out["thread"], os.getpid() > 0, open(__import__("egg_mcp").__file__).read(1) is not None)
    ''')
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "(-1,", "1)", "(-1,", "1)", "True", "True"], proc.stdout


def _effective_caps() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


@pytest.mark.skipif(not sys.platform.startswith("linux") or not (_effective_caps() >> 21) & 1,
                    reason="needs a process holding CAP_SYS_ADMIN (root) to show what is kept")
def test_confine_keeps_only_the_named_capability_and_adds_seccomp(tmp_path):
    code = textwrap.dedent(f'''
        import json
        from pathlib import Path
        from egg_mcp.sandbox import landlock
        r = landlock.confine_dict(Path({str(tmp_path)!r}), keep_caps=[21])
        eff = [l for l in open("/proc/self/status") if l.startswith("CapEff:")][0].split()[1]
        print(json.dumps({{"kept": r["capabilities_kept"], "denied": r["seccomp_denied"], "eff": eff,
                          "dropped": r["capabilities_dropped"]}}))
    ''')
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    import json

    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["kept"] == ["CAP_SYS_ADMIN"] and out["denied"] >= 30 and out["dropped"], out
    assert int(out["eff"], 16) == 1 << 21, out
