"""A job as data, and the one node-side path that runs it.

A job spec is a JSON-able dict that carries everything the job needs (its sources, its options):
nothing a lane or a Ray node holds is needed after the job, and the workspace stays with the server.
`execute` is what every lane runs for a job, a local lane in the server process and a Ray node's lane
alike: it hands the spec to that lane's `WorkerEvaluator`, which starts our worker process (the
judge, which starts the confined runner) exactly as a plain engine does. The Ray worker process
never imports a candidate; it only awaits the engine.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from egg_mcp.contract import (
    BaselineResult,
    ErrorReport,
    EvalOptions,
    EvalResult,
    JobOutcome,
    ProgressFn,
)

KINDS = ("evaluate", "baselines", "memcheck", "run_job")
MAX_FILE_BACK = 64 * 1024 * 1024
"""A wrapped job's log (ncu --log-file) is carried back from a node up to this size."""


def evaluate_spec(reference_source: str, candidate_source: str, options: EvalOptions) -> dict[str, Any]:
    return {"kind": "evaluate", "reference_source": reference_source, "candidate_source": candidate_source,
            "options": options.model_dump(mode="json")}


def baselines_spec(reference_source: str, options: EvalOptions) -> dict[str, Any]:
    return {"kind": "baselines", "reference_source": reference_source, "options": options.model_dump(mode="json")}


def memcheck_spec(reference_source: str, candidate_source: str, options: EvalOptions) -> dict[str, Any]:
    return {**evaluate_spec(reference_source, candidate_source, options), "kind": "memcheck"}


def run_job_spec(target: str, payload: dict[str, Any], *, timeout_s: float, uses_gpu: bool,
                 wrapper_argv: list[str] | None = None) -> dict[str, Any]:
    return {"kind": "run_job", "target": target, "payload": payload, "timeout_s": float(timeout_s),
            "uses_gpu": bool(uses_gpu), "wrapper_argv": list(wrapper_argv) if wrapper_argv else None}


QUEUED_KEY = "queued_behind"
"""Set by the pool on a job it hands to a lane: how many jobs that take a spare worker wait behind it."""


def spare_served(spec: dict[str, Any]) -> bool:
    """Does the lane's engine run this job in a pre-started one-shot worker of its device mode (so a
    queue of them wants spares starting in parallel)? Baselines, memcheck and unwrapped device jobs
    (tiling trials, compare); not verify (a task's persistent judge) nor a wrapped (ncu) job."""
    kind = spec["kind"]
    return kind in ("baselines", "memcheck") or (kind == "run_job" and bool(spec.get("uses_gpu"))
                                                   and not spec.get("wrapper_argv"))


def exclusive(spec: dict[str, Any]) -> bool:
    """Does this job take a lane (its device) for itself? Every job but a CPU-only `run_job` (the
    reference analysis): a candidate's timing always runs on an idle device."""
    return spec["kind"] != "run_job" or bool(spec.get("uses_gpu"))


def _file_back_paths(argv: list[str]) -> list[int]:
    """Indexes of the values of `--log-file` in a wrapper command (the files a wrapped job writes)."""
    return [i + 1 for i, a in enumerate(argv[:-1]) if a == "--log-file"]


async def execute(evaluator, spec: dict[str, Any], *, remote: bool = False,
                  progress: ProgressFn | None = None) -> dict[str, Any]:
    """Run one job spec on `evaluator` (a `WorkerEvaluator`) and return {"kind", "result", "files"}:
    the result model as JSON data, and (remote) the files a wrapped job wrote, read back by content
    because the server cannot see this node's disk."""
    kind = spec.get("kind")
    if kind not in KINDS:
        raise ValueError(f"unknown job kind {kind!r}; one of {KINDS}")
    files: dict[str, str] = {}
    if QUEUED_KEY in spec and hasattr(evaluator, "expect_jobs"):
        evaluator.expect_jobs(int(spec[QUEUED_KEY]))
    if kind in ("evaluate", "memcheck", "baselines"):
        options = EvalOptions.model_validate(spec["options"])
        if kind == "evaluate":
            result: BaseModel = await evaluator.evaluate(spec["reference_source"], spec["candidate_source"],
                                                         options, progress)
        elif kind == "memcheck":
            result = await evaluator.memcheck(spec["reference_source"], spec["candidate_source"], options)
        else:
            result = await evaluator.baselines(spec["reference_source"], options, progress)
    else:
        argv = list(spec.get("wrapper_argv") or []) or None
        local: dict[int, tuple[str, Path]] = {}
        tmp = None
        if argv and remote:  # the wrapper writes its log here on the node; the content goes back
            tmp = Path(tempfile.mkdtemp(prefix="egg-lane-files-"))
            for i in _file_back_paths(argv):
                local[i] = (argv[i], tmp / f"file{i}")
                argv[i] = str(local[i][1])
        try:
            result = await evaluator.run_job(spec["target"], spec["payload"], timeout_s=spec["timeout_s"],
                                             uses_gpu=spec["uses_gpu"], wrapper_argv=argv)
            for original, path in local.values():
                if path.exists():
                    with open(path, "rb") as f:
                        files[original] = f.read(MAX_FILE_BACK).decode(errors="replace")
        finally:
            if tmp is not None:
                for p in tmp.iterdir():
                    p.unlink()
                os.rmdir(tmp)
    return {"kind": kind, "result": result.model_dump(mode="json"), "files": files}


def decode(spec: dict[str, Any], reply: dict[str, Any]):
    """The result model of a reply (the same type the Evaluator method returns); files a remote
    wrapped job wrote are written where the server asked for them."""
    kind = spec["kind"]
    for path, text in (reply.get("files") or {}).items():
        Path(path).write_text(text)
    data = reply["result"]
    if kind == "evaluate":
        return EvalResult.model_validate(data)
    if kind == "baselines":
        return BaselineResult.model_validate(data)
    if kind == "memcheck":
        from egg_mcp.evaluation.memcheck import MemcheckResult

        return MemcheckResult.model_validate(data)
    return JobOutcome.model_validate(data)


def lost_result(spec: dict[str, Any], lost: list[str]):
    """The clear verdict of a job whose lanes were lost on every attempt: egg-mcp's fault, never the
    candidate's (not cached: the next verify of the same source runs again)."""
    why = "; ".join(lost) or "no evaluation lane is left"
    text = (f"Not your kernel: the evaluation lane running this job was lost ({why}); nothing was decided. "
            "Fix: check the cluster (egg-mcp doctor) and submit again")
    kind = spec["kind"]
    if kind == "evaluate":
        return EvalResult(verdict="runtime_error", fault="harness", summary=text,
                          error=ErrorReport(kind="lane_lost", message=text))
    if kind == "baselines":
        return BaselineResult(unavailable_reason=text)
    if kind == "memcheck":
        from egg_mcp.evaluation.memcheck import MemcheckResult

        return MemcheckResult(verdict="unavailable", summary=text)
    return JobOutcome(ok=False, error=ErrorReport(kind="lane_lost", message=text))
