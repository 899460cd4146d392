"""Where evaluators are built: `build_evaluator` (what `serve` and `bench` evaluate with: a plain engine, a pool
of this host's GPU lanes, or Ray lanes); `cluster.lanes.build_engine` (one engine, no lanes: the server's analysis
engine,
`calibrate`, each lane's own engine). `build_engine` is the package's one call of the `WorkerEvaluator`
constructor."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from egg_mcp.cluster.lanes import LanePool, build_engine, engine_settings, local_lanes, visible_gpus

if TYPE_CHECKING:
    from egg_mcp.evaluation.engine import WorkerEvaluator

log = logging.getLogger(__name__)


def build_evaluator(scratch_dir: Path, *, force_interpreter: bool = False, ray_address: str | None = None,
                    pythonpath: str | None = None, max_lanes: int | None = None, protect=(), sandbox_required=(),
                    bounds_floor: dict[str, int] | None = None) -> LanePool | WorkerEvaluator:
    """- `ray_address`: one lane per GPU of that Ray cluster; if the cluster goes away, this host's lanes.
    - GPUs here: a `LanePool` with one lane per visible GPU (one GPU: one lane, same engine as before).
    - no GPU: the plain `WorkerEvaluator` (interpreter; its CPU slots run jobs side by side).
    Every engine, a Ray node's too, gets the same `protect`, `sandbox_required` and `bounds_floor`."""
    settings = engine_settings({"protect": protect, "sandbox_required": sandbox_required,
                                "bounds_floor": bounds_floor})
    fallback = lambda: local_lanes(Path(scratch_dir) / "lanes", force_interpreter=force_interpreter,  # noqa: E731
                                   **settings)
    if ray_address:  # the Ray driver lives in the gateway process: a vanishing cluster cannot end the server
        from egg_mcp.cluster.gateway import Gateway, GatewayLane
        from egg_mcp.cluster.ray_lanes import require_ray

        require_ray(import_it=False)  # a clear error naming the extra, before a process is started
        gateway = Gateway.start(ray_address, force_interpreter=force_interpreter, pythonpath=pythonpath,
                                max_lanes=max_lanes, engine=settings)
        lanes = [GatewayLane(gateway, i) for i in range(len(gateway.lanes_info))]
        log.info("cluster mode: %d lane(s) on the Ray cluster at %s", len(lanes), ray_address)
        return LanePool(lanes, fallback=fallback, describe_cluster=gateway.describe)
    gpus = [] if force_interpreter else visible_gpus()
    if not gpus:
        return build_engine(scratch_dir, force_interpreter=force_interpreter, **settings)
    return LanePool(local_lanes(Path(scratch_dir) / "lanes", gpus=gpus[:max_lanes] if max_lanes else gpus,
                                **settings))


def describe(evaluator) -> dict | None:
    """The pool's view (lanes, GPUs by model, queue depth, the cluster) or None for a plain engine."""
    fn: Callable[[], dict] | None = getattr(evaluator, "describe", None)
    return fn() if callable(fn) else None
