"""The ncu command and the profiling job's payload: where ncu is, which kernels it profiles, its argv prefix.

Pure and server side: the candidate source is only parsed (`ast`) to name its kernels.
"""

from __future__ import annotations

import ast
import glob
import os
import re
import shutil
from pathlib import Path
from typing import Any

from egg_mcp import pysource
from egg_mcp.config import NCU_VAR, environment_copy
from egg_mcp.contract import EvalOptions

TARGET = "egg_mcp.profiling.target:run_forward"
LAUNCH_COUNT_LIMIT = 64
"""Most launches ncu profiles per forward (each costs its replay passes)."""
TIMING_ITERS_UNDER_NCU = 5


# --- finding ncu ---------------------------------------------------------------------------------

def find_ncu(env: dict[str, str] | None = None) -> str | None:
    """Path of the ncu executable: $EGG_MCP_NCU, then PATH, then the standard install locations."""
    env = environment_copy() if env is None else env
    explicit = env.get(NCU_VAR)
    candidates: list[str] = []
    if explicit:
        candidates.append(explicit)
    on_path = shutil.which("ncu", path=env.get("PATH"))
    if on_path:
        candidates.append(on_path)
    candidates.append("/usr/local/cuda/bin/ncu")
    candidates.extend(sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), key=_version_key, reverse=True))
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _version_key(path: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", Path(path).parent.name)) or (0,)


# --- the command ---------------------------------------------------------------------------------

def triton_kernel_names(source: str) -> list[str]:
    """Names of the functions decorated with triton.jit / triton.autotune / triton.heuristics in a
    candidate source, by parsing it (never executing it: this runs in the server)."""
    try:
        tree = pysource.parse(source)
    except SyntaxError:
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                text = ast.unparse(target)
                if text.split(".")[-1] in ("jit", "autotune", "heuristics"):
                    names.append(node.name)
                    break
    return list(dict.fromkeys(names))


def kernel_filter(names: list[str]) -> str:
    """ncu `-k` filter selecting only these kernels (all kernels when the names are unknown)."""
    if not names:
        return "regex:.*"
    return "regex:^(" + "|".join(re.escape(n) for n in names) + ")"


def ncu_argv(ncu: str, metrics: list[str], kernel_regex: str, log_file: str,
             launch_count: int = LAUNCH_COUNT_LIMIT) -> list[str]:
    """The ncu prefix for the worker command (ends with '--')."""
    return [
        ncu, "--csv", "--page", "raw", "--print-units", "base",
        "--metrics", ",".join(metrics),
        "--clock-control", "none",
        "--profile-from-start", "off",
        "-k", kernel_regex,
        "--launch-count", str(launch_count),
        "--log-file", log_file,
        "--",
    ]


def build_payload(reference_source: str, candidate_source: str, options: EvalOptions, *,
                  device: str, profile: bool, timing_iters: int, seed: int = 0) -> dict[str, Any]:
    """Under ncu (`profile`) per-kernel times come from CUDA events (ncu holds CUPTI); otherwise from CUPTI."""
    return {
        "per_kernel": "events" if profile else "cupti",
        "reference_source": reference_source,
        "candidate_source": candidate_source,
        "dtype": options.dtype,
        "size_overrides": dict(options.size_overrides),
        "seed": seed,
        "device": device,
        "warmup": 3,
        "timing_iters": timing_iters,
        "profile": profile,
    }
