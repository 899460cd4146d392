"""`egg-mcp calibrate`: run the probes through the evaluation engine, store, print, optionally copy."""

from __future__ import annotations

import argparse
import asyncio
import sys

from egg_mcp.calibration.run import CalibrationError, calibrate, describe
from egg_mcp.config import ServerConfig


async def _calibrate(config: ServerConfig, quick: bool, ncu: bool = False):
    from egg_mcp.cluster.lanes import build_engine

    evaluator = build_engine(config.scratch_dir(), force_interpreter=config.force_interpreter, spare_workers=0)
    try:
        return await calibrate(evaluator, config.workspace, quick=quick, ncu=ncu)
    finally:
        await evaluator.aclose()


def run_calibrate_cli(args: argparse.Namespace, config: ServerConfig) -> int:
    try:
        calibration = asyncio.run(_calibrate(config, bool(getattr(args, "quick", False)),
                                             bool(getattr(args, "ncu", False))))
    except CalibrationError as exc:
        print(f"egg-mcp calibrate: {exc}", file=sys.stderr)
        return 1
    for line in describe(calibration):
        print(line)
    print(f"stored in {config.workspace / 'calibration'}")
    if getattr(args, "out", None):
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(calibration.model_dump_json(indent=2))
        print(f"written to {args.out}")
    return 0
