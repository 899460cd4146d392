"""Lanes and the pool that dispatches to them: every GPU of a host (or of a Ray cluster) used by one queue.

A lane is one device with its own engine: locally a `WorkerEvaluator` whose workers see only that
GPU (CUDA_VISIBLE_DEVICES), on a cluster a Ray actor holding the same kind of engine on its node
(`ray_lanes.py`). `LanePool` implements the `Evaluator` API over its lanes:

- one FIFO queue; a job that times or uses a device waits for an idle lane and has it to itself, so
  a candidate's timing never shares a GPU; CPU-only jobs (reference analysis) go to the least busy lane;
- affinity: the first job of a reference (a task) binds it to a device model, and its later jobs
  (verify, baselines, profile, tiling) wait for a lane of that model: two GPU models never share a
  task's baseline;
- faults: a lane lost mid-job (`LaneLost`: its node or Ray worker died) is dropped and the job runs
  once more on another lane, else ends with a clear harness verdict (never cached); when every lane
  is gone the pool switches to its fallback lanes (this host's own) and keeps serving;
- every result says where it ran (`Placement`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import socket
import time
from pathlib import Path
from typing import Any, Callable, Literal, Protocol, Sequence

from egg_mcp.cluster import job_specs
from egg_mcp.config import cuda_visible_devices
from egg_mcp.contract import (
    BaselineResult,
    EvalOptions,
    EvalResult,
    JobOutcome,
    Placement,
    ProgressFn,
)

log = logging.getLogger(__name__)

CPU_MODEL = "cpu-interpreter"
CLUSTER_VIEW_TTL_S = 5.0
"""task_status asks Ray for its nodes at most this often (a GCS round trip per call would slow it)."""


class LaneLost(RuntimeError):
    """The lane (its node, its Ray worker) went away mid-job: the job did not finish there."""


class Lane(Protocol):
    name: str
    host: str
    device_index: int | None
    device_model: str
    via: Literal["local", "ray"]

    def has_gpu(self) -> bool: ...

    async def run(self, spec: dict[str, Any], progress: ProgressFn | None = None) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...


class LocalLane:
    """A lane on this host: a `WorkerEvaluator` pinned to one GPU (or the CPU interpreter)."""

    via: Literal["local", "ray"] = "local"

    def __init__(self, evaluator, *, device_index: int | None, device_model: str, name: str | None = None,
                 host: str | None = None):
        self.evaluator = evaluator
        self.device_index = device_index
        self.device_model = device_model
        self.host = host or socket.gethostname()
        self.name = name or (f"local/gpu{device_index}" if device_index is not None else "local/cpu")

    def has_gpu(self) -> bool:
        return self.evaluator.has_gpu()

    async def run(self, spec: dict[str, Any], progress: ProgressFn | None = None) -> dict[str, Any]:
        return await job_specs.execute(self.evaluator, spec, remote=False, progress=progress)

    async def aclose(self) -> None:
        close = getattr(self.evaluator, "aclose", None)
        if close is not None:
            await close()


def visible_gpus() -> list[tuple[str, str]]:
    """(CUDA_VISIBLE_DEVICES value, model name) of each GPU this process may use, NVML's names."""
    from egg_mcp.hardware import nvml_gpu_names

    names = nvml_gpu_names()
    visible = cuda_visible_devices()
    if visible is None:
        return [(str(i), n) for i, n in enumerate(names)]
    out = []
    for v in (v.strip() for v in visible.split(",")):
        if v.isdigit() and int(v) < len(names):
            out.append((v, names[int(v)]))
    return out


def engine_settings(raw: Any = None) -> dict[str, Any]:
    """What the server tells each engine it evaluates with, wherever its lane runs (this host, a Ray node), as
    `WorkerEvaluator` keywords: the paths no tool or toolchain grant may expose (`protect`), the sandbox floor
    its runners and confined jobs are held to (`sandbox_required`) and the runners' bound floors
    (`bounds_floor`). `raw`: keywords, or their JSON form from the gateway's argv or a Ray actor's argument."""
    raw = raw if isinstance(raw, dict) else {}
    floor = raw.get("bounds_floor")
    return {"protect": [str(p) for p in raw.get("protect") or ()],
            "sandbox_required": [str(n) for n in raw.get("sandbox_required") or ()],
            "bounds_floor": dict(floor) if isinstance(floor, dict) else {}}


def local_lanes(scratch_dir: Path, *, force_interpreter: bool = False, gpus: list[tuple[str, str]] | None = None,
                **engine_kwargs) -> list[LocalLane]:
    """One lane per visible GPU (its engine's workers see only that GPU); without a GPU one CPU lane."""

    gpus = [] if force_interpreter else (visible_gpus() if gpus is None else gpus)
    if not gpus:
        ev = build_engine(scratch_dir, force_interpreter=True, **engine_kwargs)
        return [LocalLane(ev, device_index=None, device_model=CPU_MODEL)]
    return [LocalLane(build_engine(Path(scratch_dir) / f"gpu{dev}", device=dev, **engine_kwargs),
                      device_index=int(dev), device_model=model) for dev, model in gpus]


def reference_key(reference_source: str) -> str:
    return hashlib.sha256(reference_source.encode()).hexdigest()[:24]


class LanePool:
    """An `Evaluator` over lanes (see the module docstring)."""

    def __init__(self, lanes: Sequence[Lane], *, fallback: Callable[[], Sequence[Lane]] | None = None, retries: int = 1,
                 describe_cluster: Callable[[], dict[str, Any]] | None = None):
        self.lanes: list[Lane] = list(lanes)
        self.fallback = fallback
        self.retries = retries
        self.describe_cluster = describe_cluster
        self.lost: list[str] = []
        self.fell_back = False
        self._busy: set[str] = set()
        self._cpu_jobs: dict[str, int] = {}
        self._waiters: list[tuple[asyncio.Future, str | None, bool]] = []  # (lane wanted, task key, spare-served)
        self._affinity: dict[str, str] = {}
        self._moved_from: dict[str, str] = {}
        self._cluster_view: tuple[float, dict[str, Any]] | None = None
        self.jobs_done = 0

    # -- the Evaluator API ---------------------------------------------------------------------

    def has_gpu(self) -> bool:
        return any(lane.has_gpu() for lane in self.lanes)

    async def evaluate(self, reference_source: str, candidate_source: str, options: EvalOptions,
                       progress: ProgressFn | None = None) -> EvalResult:
        spec = job_specs.evaluate_spec(reference_source, candidate_source, options)
        return await self._dispatch(spec, reference_key(reference_source), progress)

    async def baselines(self, reference_source: str, options: EvalOptions,
                        progress: ProgressFn | None = None) -> BaselineResult:
        spec = job_specs.baselines_spec(reference_source, options)
        return await self._dispatch(spec, reference_key(reference_source), progress)

    async def memcheck(self, reference_source: str, candidate_source: str, options: EvalOptions):
        spec = job_specs.memcheck_spec(reference_source, candidate_source, options)
        return await self._dispatch(spec, reference_key(reference_source), None)

    async def run_job(self, target: str, payload: dict[str, Any], *, timeout_s: float, uses_gpu: bool,
                      wrapper_argv: list[str] | None = None) -> JobOutcome:
        spec = job_specs.run_job_spec(target, payload, timeout_s=timeout_s, uses_gpu=uses_gpu,
                                      wrapper_argv=wrapper_argv)
        ref = payload.get("reference_source") if isinstance(payload, dict) else None
        return await self._dispatch(spec, reference_key(ref) if isinstance(ref, str) else None, None)

    async def aclose(self) -> None:
        for lane in self.lanes:
            try:
                await lane.aclose()
            except Exception:  # a lost lane may fail to close; the others still must
                log.debug("closing lane %s failed", lane.name, exc_info=True)

    # -- visibility ----------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """Lanes (busy or idle), GPUs by model, queue depth, lost lanes; the cluster's nodes in Ray mode."""
        by_model: dict[str, int] = {}
        for lane in self.lanes:
            by_model[lane.device_model] = by_model.get(lane.device_model, 0) + 1
        view: dict[str, Any] = {
            "lanes": [{"name": lane.name, "host": lane.host, "device_index": lane.device_index,
                       "device_model": lane.device_model, "via": lane.via, "busy": lane.name in self._busy}
                      for lane in self.lanes],
            "gpus_by_model": by_model,
            "queue_depth": sum(1 for f, _, _ in self._waiters if not f.done()),
            "jobs_done": self.jobs_done,
            "lost_lanes": self.lost[-10:],
            "fell_back_to_local": self.fell_back,
        }
        if self.describe_cluster is not None and not self.fell_back:
            now = time.monotonic()
            if self._cluster_view is None or now - self._cluster_view[0] > CLUSTER_VIEW_TTL_S:
                try:
                    cluster = self.describe_cluster()
                except Exception as exc:  # the cluster is gone: say so, keep serving
                    cluster = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                self._cluster_view = (now, cluster)
            view["cluster"] = self._cluster_view[1]
        return view

    # -- dispatch ------------------------------------------------------------------------------

    async def _dispatch(self, spec: dict[str, Any], key: str | None, progress: ProgressFn | None) -> Any:
        """Any: the model jobs.decode gives for the spec's kind, the calling Evaluator method's own."""
        lost: list[str] = []
        moved: str | None = None
        for attempt in range(1, self.retries + 2):
            exclusive = job_specs.exclusive(spec)
            sent = spec
            if exclusive:
                lane, moved_now = await self._acquire(key, job_specs.spare_served(spec))
                moved = moved or moved_now
                if lane is not None:  # the lane's engine keeps that many spare workers starting (its burst)
                    sent = {**spec, job_specs.QUEUED_KEY: self._queued_for(lane)}
            else:
                lane = self._least_busy()
            if lane is None:
                return job_specs.lost_result(spec, lost + ["no evaluation lane is left"])
            try:
                reply = await lane.run(sent, progress)
            except LaneLost as exc:
                lost.append(f"{lane.name}: {exc}"[:300])
                self._drop(lane, str(exc))
                continue
            finally:
                self._release(lane, exclusive)
            result = job_specs.decode(spec, reply)
            self.jobs_done += 1
            if isinstance(result, (EvalResult, BaselineResult, JobOutcome)):  # the models with a placement
                note = "; ".join(filter(None, [moved, ("lost before: " + "; ".join(lost)) if lost else None])) or None
                result.placement = Placement(host=lane.host, device_index=lane.device_index,
                                             device_model=lane.device_model, lane=lane.name, via=lane.via,
                                             attempts=attempt, note=note)
            return result
        return job_specs.lost_result(spec, lost)

    def _alive_models(self) -> set[str]:
        return {lane.device_model for lane in self.lanes}

    def _queued_for(self, lane: Lane) -> int:
        """Jobs still waiting that this lane may get and that its engine serves with a one-shot spare
        worker: the engine cannot see this queue (it gets one job at a time), so it is told."""
        return sum(1 for future, key, served in self._waiters
                   if served and not future.done()
                   and (self._affinity.get(key, lane.device_model) if key is not None
                        else lane.device_model) == lane.device_model)

    async def _acquire(self, key: str | None, spare_served: bool = False) -> tuple[Lane | None, str | None]:
        """Wait (FIFO) for an idle lane of the task's model; None when no lane is left at all."""
        moved = None
        if key is not None and key in self._moved_from:
            old = self._moved_from.pop(key)
            moved = f"this task's earlier jobs ran on {old}, whose lanes are gone: its baselines were measured there"
        if not self.lanes:
            self._fall_back()
            if not self.lanes:
                return None, moved
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiters.append((future, key, spare_served))
        self._assign()
        try:
            lane = await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled() and future.result() is not None:
                self._release(future.result(), True)
            raise
        return lane, moved

    def _assign(self) -> None:
        """Hand idle lanes to the waiters in arrival order (a waiter bound to a busy model waits on)."""
        for entry in list(self._waiters):
            future, key, _ = entry
            if future.done():
                self._waiters.remove(entry)
                continue
            if not self.lanes:
                self._waiters.remove(entry)
                future.set_result(None)
                continue
            model = self._affinity.get(key) if key else None
            lane = next((ln for ln in self.lanes if ln.name not in self._busy
                         and (model is None or ln.device_model == model)), None)
            if lane is None:
                continue
            self._busy.add(lane.name)
            if key:
                self._affinity.setdefault(key, lane.device_model)
            self._waiters.remove(entry)
            future.set_result(lane)

    def _least_busy(self) -> Lane | None:
        if not self.lanes:
            self._fall_back()
        if not self.lanes:
            return None
        lane = min(self.lanes, key=lambda ln: self._cpu_jobs.get(ln.name, 0))
        self._cpu_jobs[lane.name] = self._cpu_jobs.get(lane.name, 0) + 1
        return lane

    def _release(self, lane: Lane, exclusive: bool) -> None:
        if exclusive:
            self._busy.discard(lane.name)
        else:
            self._cpu_jobs[lane.name] = max(0, self._cpu_jobs.get(lane.name, 0) - 1)
        self._assign()

    def _drop(self, lane: Lane, why: str) -> None:
        if lane in self.lanes:
            self.lanes.remove(lane)
            self.lost.append(f"{lane.name}: {why}"[:300])
            log.warning("evaluation lane %s lost (%s); %d lane(s) left", lane.name, why, len(self.lanes))
        if not self.lanes:
            self._fall_back()
        for key, model in list(self._affinity.items()):
            if model not in self._alive_models():
                self._moved_from[key] = self._affinity.pop(key)
        self._assign()

    def _fall_back(self) -> None:
        if self.fell_back or self.fallback is None:
            return
        self.fell_back = True
        try:
            self.lanes = list(self.fallback())
        except Exception as exc:
            log.error("no fallback lanes: %s", exc)
            self.lanes = []
        log.warning("every cluster lane is gone: serving on %d local lane(s)", len(self.lanes))


def build_engine(scratch_dir: Path | str, **options: Any) -> Any:
    """One `WorkerEvaluator` (keywords as its constructor's: force_interpreter, device, spare_workers, max_cpu_jobs,
    protect, sandbox_required, bounds_floor, ...). Imported lazily: the engine is heavy and optional here. Without
    an explicit spare_workers, $EGG_MCP_SPARE_WORKERS (config.spare_workers_setting) sets it when given."""
    from egg_mcp.config import spare_workers_setting
    from egg_mcp.evaluation.engine import WorkerEvaluator

    spares = spare_workers_setting()
    if spares is not None:
        options.setdefault("spare_workers", spares)

    return WorkerEvaluator(scratch_dir=scratch_dir, **options)
