"""Cluster mode: lanes that are Ray actors, one per GPU of the cluster (`egg-mcp serve|bench --ray`).

Ray is imported only here, and only when cluster mode is asked for; without it `require_ray` says
which extra to install. Each lane is an actor holding one GPU (`num_gpus=1`, pinned to its node, and
its node's `accelerator_type:<model>` label when Ray found one) and a `WorkerEvaluator` on that node,
given the settings a local engine gets (`lanes.engine_settings`: the server's sandbox floor, which its
runners' own reports are checked against there, the protected paths and the runners' bound floors).
A job goes to it as data (`job_specs.py`: sources and options in, a result model as JSON out) and runs
through `job_specs.execute`, the same path a local lane runs: the actor starts our worker process (the
judge, which starts the confined runner); the Ray worker process never imports a candidate.
An actor that dies mid-job (its node gone, its process killed) surfaces as `LaneLost`; the pool
retries the job once elsewhere (`lanes.LanePool`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import tempfile
from types import ModuleType
from typing import Any, Literal, overload

from egg_mcp.cluster.lanes import CPU_MODEL, LaneLost, engine_settings

log = logging.getLogger(__name__)

EXTRA = 'pip install "egg-mcp[ray]"'
START_TIMEOUT_S = 180.0
MODEL_LABEL = "accelerator_type:"


class ClusterError(RuntimeError):
    """Cluster mode cannot start; the message says what to install or pass."""


@overload
def require_ray(import_it: Literal[True] = True) -> ModuleType: ...
@overload
def require_ray(import_it: Literal[False]) -> None: ...
def require_ray(import_it: bool = True) -> ModuleType | None:
    """Ray, or a ClusterError naming the extra. `import_it=False` only checks it is installed (the server
    itself never imports Ray: the gateway process is the driver)."""
    if not import_it:
        import importlib.util

        if importlib.util.find_spec("ray") is not None:
            return None
    try:
        import ray
    except ImportError:
        raise ClusterError(f"--ray needs Ray, which is not installed here: {EXTRA} (on the server and on every "
                           "node of the cluster), or run without --ray to use this host's GPUs") from None
    return ray


class NodeLane:
    """The node side of a lane (a Ray actor): one engine on this node's GPU, created on first use, with the
    server's settings (`engine`: lanes.engine_settings), so its runners get a local engine's floor, protected
    paths and bounds."""

    def __init__(self, force_interpreter: bool, model_label: str | None, engine: dict[str, Any] | None = None):
        self.force_interpreter = force_interpreter
        self.model_label = model_label
        self.settings = engine_settings(engine)
        self.evaluator = None

    def _engine(self):
        if self.evaluator is None:
            from egg_mcp.cluster.lanes import build_engine

            scratch = tempfile.mkdtemp(prefix="egg-lane-")
            self.evaluator = build_engine(scratch, force_interpreter=self.force_interpreter, **self.settings)
        return self.evaluator

    async def describe(self) -> dict[str, Any]:
        import ray

        import egg_mcp

        gpu_ids = [int(g) for g in ray.get_gpu_ids()]
        model = None
        if gpu_ids:
            from egg_mcp.hardware import nvml_gpu_names

            names = nvml_gpu_names()
            model = names[gpu_ids[0]] if gpu_ids[0] < len(names) else None
        model = model or self.model_label or (CPU_MODEL if not gpu_ids else "unknown GPU")
        return {"host": socket.gethostname(), "pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id(),
                "device_index": gpu_ids[0] if gpu_ids else None, "device_model": model,
                "gpu": bool(gpu_ids) and not self.force_interpreter, "version": egg_mcp.__version__}

    async def run(self, spec: dict[str, Any]) -> dict[str, Any]:
        from egg_mcp.cluster import job_specs

        return await job_specs.execute(self._engine(), spec, remote=True)

    async def close(self) -> None:
        if self.evaluator is not None:
            await self.evaluator.aclose()


class RayLane:
    """The server side of a lane: a handle on a `NodeLane` actor."""

    via: Literal["local", "ray"] = "ray"

    def __init__(self, actor, info: dict[str, Any]):
        self.actor = actor
        self.info = info
        self.host = info["host"]
        self.device_index = info["device_index"]
        self.device_model = info["device_model"]
        where = f"gpu{self.device_index}" if self.device_index is not None else "cpu"
        self.name = f"ray/{info['host']}/{where}/{info['pid']}"

    def has_gpu(self) -> bool:
        return bool(self.info.get("gpu"))

    async def run(self, spec: dict[str, Any], progress=None) -> dict[str, Any]:
        import ray.exceptions as rex

        try:
            return await self.actor.run.remote(spec)
        except (rex.RayActorError, rex.WorkerCrashedError, rex.NodeDiedError, rex.ObjectLostError,
                rex.RaySystemError, ConnectionError) as exc:
            raise LaneLost(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]) from exc

    async def aclose(self) -> None:
        import ray

        try:
            await self.actor.close.remote()
        except Exception:
            pass
        try:
            ray.kill(self.actor)
        except Exception:
            pass


def connect(address: str, *, force_interpreter: bool = False, pythonpath: str | None = None,
            max_lanes: int | None = None, engine: dict[str, Any] | None = None,
            timeout_s: float = START_TIMEOUT_S) -> list[RayLane]:
    """Join the cluster at `address` ('auto': the one this machine belongs to, or a 'host:port' /
    'ray://host:port') and start one lane per GPU (one per node without GPUs). `pythonpath` is put in
    front of the lanes' PYTHONPATH (tests: this checkout; a real cluster installs egg-mcp on each node);
    `engine`: the server's settings for each lane's engine (lanes.engine_settings)."""
    ray = require_ray()
    if not ray.is_initialized():
        try:
            with contextlib.redirect_stdout(sys.stderr):  # on stdio, stdout belongs to the MCP protocol
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        except Exception as exc:
            raise ClusterError(f"cannot join the Ray cluster at {address!r}: {exc}. Start one with `ray start "
                               "--head` (and `ray start --address HEAD:6379` on each node) or pass its "
                               "address") from exc
    actor_cls = ray.remote(NodeLane)
    runtime_env = {"env_vars": {"PYTHONPATH": pythonpath}} if pythonpath else None
    pending = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        res = node.get("Resources", {})
        label = next((k for k in res if k.startswith(MODEL_LABEL)), None)
        gpus = 0 if force_interpreter and not res.get("GPU") else int(res.get("GPU", 0))
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
        for _ in range(gpus or 1):
            opts: dict[str, Any] = {"scheduling_strategy": strategy, "max_restarts": 0, "max_concurrency": 8}
            if gpus:
                opts.update(num_gpus=1, num_cpus=0)
                if label:
                    opts["resources"] = {label: 0.001}
            else:
                opts["num_cpus"] = 1
            if runtime_env:
                opts["runtime_env"] = runtime_env
            model = label[len(MODEL_LABEL):] if label else None
            pending.append(actor_cls.options(**opts).remote(force_interpreter, model, engine_settings(engine)))
            if max_lanes is not None and len(pending) >= max_lanes:
                break
        if max_lanes is not None and len(pending) >= max_lanes:
            break
    refs = {actor.describe.remote(): actor for actor in pending}
    ready, not_ready = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
    for ref in not_ready:  # no free GPU for it (another client holds them): not a lane
        ray.kill(refs[ref])
    lanes = [RayLane(refs[ref], ray.get(ref)) for ref in ready]
    if not lanes:
        raise ClusterError(f"the Ray cluster at {address!r} gave no lane within {timeout_s:.0f} s (no free GPU or "
                           "CPU); check `ray status`")
    import egg_mcp

    for lane in lanes:
        if lane.info.get("version") != egg_mcp.__version__:
            log.warning("lane %s runs egg-mcp %s, the server %s: install the same version on every node",
                        lane.name, lane.info.get("version"), egg_mcp.__version__)
    return lanes


def describe_cluster() -> dict[str, Any]:
    """Nodes (alive / dead), GPUs by model, free GPUs: from Ray's own view of the cluster."""
    ray = require_ray()
    nodes = ray.nodes()
    by_model: dict[str, float] = {}
    for node in nodes:
        if not node.get("Alive"):
            continue
        res = node.get("Resources", {})
        label = next((k[len(MODEL_LABEL):] for k in res if k.startswith(MODEL_LABEL)), "unlabelled")
        if res.get("GPU"):
            by_model[label] = by_model.get(label, 0) + res["GPU"]
    free = ray.available_resources()
    return {"nodes_alive": sum(1 for n in nodes if n.get("Alive")),
            "nodes_dead": sum(1 for n in nodes if not n.get("Alive")),
            "gpus_by_model": by_model, "gpus_free": free.get("GPU", 0.0), "cpus_free": free.get("CPU", 0.0)}
