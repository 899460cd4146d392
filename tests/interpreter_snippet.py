"""Run a snippet of Triton code in a fresh process under the CPU interpreter (TRITON_INTERPRET=1 must be set before
triton is imported, so not in the test's own process); the snippet prints "ok" when its asserts held."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_snippet(snippet: str, cache_dir: Path, timeout: float = 300) -> None:
    env = dict(os.environ, TRITON_INTERPRET="1", TRITON_CACHE_DIR=str(cache_dir))
    run = subprocess.run([sys.executable, "-c", snippet], env=env, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0 and "ok" in run.stdout, run.stderr[-3000:]
