"""`doctor --ray` is bounded (issue 31): an address nobody answers on, a stale RAY_ADDRESS or a stale
`ray_current_cluster` record gives "no reachable Ray cluster at ..." at once, and a port that accepts
connections but is no Ray head gives up within the check's time limit."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from egg_mcp.config import ServerConfig
from egg_mcp.doctor import FAIL, RAY_CHECK_S, lane_lines

pytest.importorskip("ray")
ROOT = Path(__file__).resolve().parents[1]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_line(tmp_path, address: str) -> tuple[str, str, float]:
    start = time.monotonic()
    lines = lane_lines(ServerConfig(workspace=tmp_path / "ws", force_interpreter=True, ray_address=address))
    elapsed = time.monotonic() - start
    status, what, detail = lines[-1]
    assert what == "ray cluster", lines
    return status, detail, elapsed


def test_the_whole_check_stays_under_15_seconds():
    assert RAY_CHECK_S + 3 <= 15


def test_a_stale_ray_address_is_named_at_once(tmp_path, monkeypatch):
    port = _closed_port()
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    status, detail, elapsed = _ray_line(tmp_path, "auto")
    assert status == FAIL and elapsed < 5, (detail, elapsed)
    assert detail.startswith(f"no reachable Ray cluster at 127.0.0.1:{port}: ") and "RAY_ADDRESS" in detail, detail


def test_a_stale_local_cluster_record_is_named_at_once(tmp_path, monkeypatch):
    port = _closed_port()
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{port}\n")
    status, detail, elapsed = _ray_line(tmp_path, "auto")
    assert status == FAIL and elapsed < 5, (detail, elapsed)
    assert f"no reachable Ray cluster at 127.0.0.1:{port}: " in detail and "stale record" in detail, detail


def test_an_explicit_closed_port(tmp_path):
    port = _closed_port()
    status, detail, elapsed = _ray_line(tmp_path, f"127.0.0.1:{port}")
    assert status == FAIL and elapsed < 5 and detail.startswith(f"no reachable Ray cluster at 127.0.0.1:{port}: ")


def test_a_port_that_accepts_but_is_no_ray_head_gives_up_in_time(tmp_path):
    # in a subprocess: the abandoned ray.init stays in its (daemon) thread, away from this test process
    script = textwrap.dedent(f"""
        import os, socket, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        os.environ.pop("RAY_ADDRESS", None)
        s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(50)
        import egg_mcp.doctor as d
        from egg_mcp.config import ServerConfig
        d.RAY_CHECK_S = 2.0
        t = time.monotonic()
        line = d.lane_lines(ServerConfig(workspace={str(tmp_path / 'ws')!r}, force_interpreter=True,
                                         ray_address="127.0.0.1:%d" % s.getsockname()[1]))[-1]
        print(line[0], "|", line[2], "|", round(time.monotonic() - t, 1), flush=True)
    """)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    status, detail, took = proc.stdout.strip().splitlines()[-1].split(" | ")
    assert status.strip() == FAIL.strip() and "no reachable Ray cluster at 127.0.0.1:" in detail, proc.stdout
    assert float(took) < 5 and time.monotonic() - start < 30, (took, proc.stdout)
