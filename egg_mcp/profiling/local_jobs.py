"""A minimal `run_job` for the profiler's GPU scripts and tests: one fresh subprocess per job.

It exists so the benchmark and the GPU tests can drive `profile_candidate` before (and
independently of) the evaluation engine; it is NOT the engine and gives none of its isolation
guarantees, so the server must never use it for LLM-written code.

Worker command: [*wrapper_argv, python, -m, egg_mcp.profiling.local_jobs, TARGET, PAYLOAD, RESULT]
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from egg_mcp.evaluation.api import ErrorReport, JobOutcome

PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = PACKAGE_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def worker_argv(target: str, payload_path: str, result_path: str) -> list[str]:
    return [sys.executable, "-m", "egg_mcp.profiling.local_jobs", target, payload_path, result_path]


class LocalJobRunner:
    """Implements the `run_job` / `has_gpu` part of the Evaluator protocol with plain subprocesses."""

    def __init__(self, has_gpu: bool | None = None) -> None:
        self._has_gpu = has_gpu

    def has_gpu(self) -> bool:
        if self._has_gpu is None:
            from egg_mcp.hardware import nvml_gpu_names

            self._has_gpu = bool(nvml_gpu_names())
        return self._has_gpu

    async def evaluate(self, *args, **kwargs):  # pragma: no cover - not needed by the profiler
        raise NotImplementedError("LocalJobRunner only runs jobs; use the evaluation engine to verify")

    async def baselines(self, *args, **kwargs):  # pragma: no cover
        raise NotImplementedError("LocalJobRunner only runs jobs; use the evaluation engine for baselines")

    async def run_job(self, target: str, payload: dict[str, Any], *, timeout_s: float, uses_gpu: bool,
                      wrapper_argv: list[str] | None = None) -> JobOutcome:
        return await asyncio.to_thread(self._run_sync, target, payload, timeout_s, wrapper_argv)

    def _run_sync(self, target: str, payload: dict[str, Any], timeout_s: float,
                  wrapper_argv: list[str] | None) -> JobOutcome:
        with tempfile.TemporaryDirectory(prefix="egg-job-") as tmp:
            payload_path, result_path = Path(tmp) / "payload.json", Path(tmp) / "result.json"
            payload_path.write_text(json.dumps(payload))
            argv = list(wrapper_argv or []) + worker_argv(target, str(payload_path), str(result_path))
            t0 = time.perf_counter()
            proc = subprocess.Popen(argv, cwd=tmp, env=worker_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True)
            try:
                out, err = proc.communicate(timeout=timeout_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, err = proc.communicate()
                timed_out = True
            wall = time.perf_counter() - t0
            data = json.loads(result_path.read_text()) if result_path.exists() else {}
            error = ErrorReport(**data["error"]) if data.get("error") else None
            return JobOutcome(
                ok=not timed_out and proc.returncode == 0 and "result" in data, result=data.get("result"),
                error=error, timed_out=timed_out, exit_code=proc.returncode, stdout_tail=(out or "")[-8000:],
                stderr_tail=(err or "")[-8000:], wall_s=wall,
            )


def _main(argv: list[str]) -> int:
    target, payload_path, result_path = argv
    module_name, func_name = target.split(":")
    payload = json.loads(Path(payload_path).read_text())
    try:
        result = getattr(importlib.import_module(module_name), func_name)(payload)
        Path(result_path).write_text(json.dumps({"result": result}))
        return 0
    except Exception as exc:  # the job's failure is data for the caller
        Path(result_path).write_text(json.dumps({"error": {
            "kind": type(exc).__name__, "message": str(exc)[:2000], "traceback": traceback.format_exc()[-4000:]}}))
        return 1


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
