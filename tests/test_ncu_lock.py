"""ncu's host-wide lock file: the one write an ncu-wrapped process gets outside its own dir
(egg_mcp/evaluation/tool_confine.py; why: the H200 log
benchmarks/results/archive/h200_2026-12-01_0f0ae24-6438ad0/ncu_caps.log)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from egg_mcp.evaluation import tool_confine
from egg_mcp.sandbox import _sys as S


def test_the_lock_file_is_created_shared_and_returned(tmp_path):
    (lock,) = tool_confine.ncu_lock_files([str(tmp_path)])
    assert lock == tmp_path / "nvidia" / "nsight_compute" / "lock" and lock.is_file()
    assert lock.stat().st_mode & 0o777 == 0o666  # every user's ncu shares it, as ncu itself makes it
    assert tool_confine.ncu_lock_files([str(tmp_path), str(tmp_path)]) == [lock]  # once


def test_a_symlink_on_the_path_is_never_granted(tmp_path):
    secret = tmp_path / "elsewhere"
    (secret / "nsight_compute").mkdir(parents=True)
    (secret / "nsight_compute" / "lock").write_text("someone's file")
    root = tmp_path / "tmp"
    root.mkdir()
    (root / "nvidia").symlink_to(secret)  # /tmp/nvidia -> somewhere else
    assert tool_confine.ncu_lock_files([str(root)]) == []
    other = tmp_path / "tmp2" / "nvidia" / "nsight_compute"
    other.mkdir(parents=True)
    (other / "lock").symlink_to(secret / "nsight_compute" / "lock")  # the file itself a symlink
    assert tool_confine.ncu_lock_files([str(tmp_path / "tmp2")]) == []


@pytest.mark.skipif(not sys.platform.startswith("linux") or not S.landlock_abi(), reason="needs Landlock")
def test_a_confined_ncu_process_may_write_the_lock_and_nothing_else_outside(tmp_path):
    private = tmp_path / "private"
    private.mkdir()
    code = textwrap.dedent(f'''
        import os
        from pathlib import Path
        from egg_mcp.evaluation import tool_confine
        locks = tool_confine.ncu_lock_files()
        from egg_mcp.evaluation import confinement
        confinement.confine(Path({str(private)!r}), extra_write=locks)
        out = []
        for path in [str(locks[0]), {str(tmp_path / "other.txt")!r}, str(locks[0].parent / "x")]:
            try:
                with open(path, "a") as f:
                    f.write("")
                out.append("ok")
            except PermissionError:
                out.append("denied")
        print(" ".join(out))
    ''')
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ok", "denied", "denied"], proc.stdout
