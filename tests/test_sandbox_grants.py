"""Grants without leaks: the toolchain and tool trees granted to a runner never expose a home directory, the
workspace or the user's allowed folders, wherever the toolchain is found (issue 28, item 4)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from egg_mcp.config import PROTECT_VAR
from egg_mcp.evaluation.tool_confine import injection_roots, tool_root
from egg_mcp.sandbox import _sys as S
from egg_mcp.sandbox import landlock

REPO = Path(__file__).resolve().parent.parent
ABI = S.landlock_abi() if sys.platform == "linux" else None


def _tool(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def test_toolchain_in_a_home_grants_its_bin_dir_never_the_home(tmp_path, monkeypatch):
    """A `cc` in ~/bin (and one in ~/.local/bin, with the workspace under ~/.local/share) on the runner's PATH:
    the grant is that bin dir, never the home or a dir holding the workspace; a tree holding an allowed folder
    and one inside the workspace are never granted either."""
    home = tmp_path / "home" / "alice"
    workspace = home / ".local" / "share" / "egg-mcp"
    allowed = tmp_path / "data" / "kernels"
    workspace.mkdir(parents=True)
    allowed.mkdir(parents=True)
    monkeypatch.setattr(landlock, "home_dirs", lambda: [str(home)])
    protect = landlock.protected_paths([workspace, allowed])

    _tool(home / "bin" / "cc")
    monkeypatch.setenv("PATH", f"{home / 'bin'}:/usr/bin:/bin")
    monkeypatch.delenv("CC", raising=False)
    grants = landlock._toolchain_paths(protect)
    assert str(home / "bin") in grants and str(home) not in grants

    _tool(home / ".local" / "bin" / "gcc")
    monkeypatch.setenv("PATH", f"{home / '.local' / 'bin'}:/usr/bin:/bin")
    assert landlock._toolchain_paths(protect) == [str(home / ".local" / "bin")]  # not ~/.local (holds the workspace)

    _tool(tmp_path / "data" / "bin" / "cc")  # /data/bin/cc: /data holds the allowed folder
    monkeypatch.setenv("PATH", f"{tmp_path / 'data' / 'bin'}:/usr/bin:/bin")
    assert landlock._toolchain_paths(protect) == [str(tmp_path / "data" / "bin")]
    _tool(workspace / "bin" / "cc")  # inside the workspace: nothing
    monkeypatch.setenv("PATH", f"{workspace / 'bin'}:/usr/bin:/bin")
    assert landlock._toolchain_paths(protect) == []

    monkeypatch.setenv("CUDA_HOME", str(home))  # a site tool path that is a home: not granted
    assert landlock._tool_paths(protect) == []
    # the profiler's tree (ncu) follows the same rule
    assert tool_root(str(_tool(home / "bin" / "ncu")), avoid=[str(workspace)]) == str(home / "bin")
    lib = _tool(home / "target" / "linux-x64" / "libInjection.so")
    assert injection_roots({"LD_PRELOAD": str(lib)}, avoid=[], maps_text="") == []  # the tree would be the home
    assert all(landlock.grantable(p, protect) for p in (home / "bin", home / ".local" / "bin"))
    assert not any(landlock.grantable(p, protect) for p in ("/", "/home", home, home / ".local", tmp_path / "data"))


_CHILD = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    from egg_mcp.sandbox import confine
    home, private = Path(sys.argv[1]), Path(sys.argv[2])
    report = confine(private, env_allowlist=True)
    out = {"level": report.level}
    for name, path in (("tool", home / "bin" / "cc"), ("secret", home / "secret.txt"),
                       ("workspace_db", home / ".local" / "share" / "egg-mcp" / "egg.sqlite3")):
        try:
            out[name] = Path(path).read_text()[:20]
        except OSError as exc:
            out[name] = type(exc).__name__
    print(json.dumps(out))
""")


@pytest.mark.skipif(ABI is None, reason="kernel without Landlock (or blocked by seccomp)")
def test_confined_process_reads_the_home_bin_toolchain_but_not_the_home(tmp_path):
    """End to end under real Landlock: a process whose PATH has a `cc` in <home>/bin, with the workspace under
    <home>/.local/share said protected the way the server says it (config.PROTECT_VAR), reads that cc and
    nothing else of the home (the tool's prefix, <home>, holds the workspace)."""
    home = tmp_path / "home"
    _tool(home / "bin" / "cc")
    (home / "secret.txt").write_text("ssh key")
    db = home / ".local" / "share" / "egg-mcp" / "egg.sqlite3"
    db.parent.mkdir(parents=True)
    db.write_text("workspace")
    private = tmp_path / "private"
    private.mkdir()
    env = {"PATH": f"{home / 'bin'}:/usr/bin:/bin", "PYTHONPATH": str(REPO), PROTECT_VAR: str(db.parent)}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(home), str(private)], env=env, capture_output=True,
                          text=True, timeout=120, cwd=private)
    assert done.returncode == 0, done.stderr
    import json

    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["level"].startswith("landlock"), out
    assert out["tool"].startswith("#!/bin/sh"), out  # the toolchain's bin dir is granted
    assert out["secret"] == "PermissionError" and out["workspace_db"] == "PermissionError", out
