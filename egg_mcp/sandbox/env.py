"""The runner's environment: a strict allow-list, with every writable location inside its private dir.

Allowed from the parent's environment (nothing else passes):
- `PATH`, `LANG`, `LANGUAGE`, `LC_*`, `TZ`, `TERM`: locale and program lookup;
- `CUDA_VISIBLE_DEVICES`, `CUDA_DEVICE_ORDER`, `CUDA_MODULE_LOADING`, `CUDA_LAUNCH_BLOCKING`,
  `CUDA_HOME`, `CUDA_PATH`, `NVIDIA_VISIBLE_DEVICES`, `NVIDIA_DRIVER_CAPABILITIES`, `LD_LIBRARY_PATH`:
  what the driver and torch need to find the GPU and its libraries;
- `OMP_NUM_THREADS`, `MKL_NUM_THREADS`, `OPENBLAS_NUM_THREADS`: CPU thread counts (timing stability);
- `TRITON_PTXAS_PATH`, `TRITON_CUOBJDUMP_PATH`, `TRITON_NVDISASM_PATH`, `TRITON_LIBCUDA_PATH`,
  `TRITON_LIBDEVICE_PATH`: where a site keeps its CUDA tools.
Never passed, even if a pattern above would match: any name containing TOKEN, KEY, SECRET, PASSWORD,
CREDENTIAL, or starting with AWS_, GCP_, GOOGLE_, AZURE_, HF_, HUGGING, OPENAI_, ANTHROPIC_, EGG_MCP_.
Set here: HOME, TMPDIR/TMP/TEMP, XDG_{CACHE,CONFIG,DATA,STATE,RUNTIME}_*, TRITON_CACHE_DIR,
TORCHINDUCTOR_CACHE_DIR, CUDA_CACHE_PATH, PYTHONPATH (the egg_mcp package parent only),
PYTHONDONTWRITEBYTECODE, PYTHONUNBUFFERED, PYTHONNOUSERSITE, TRITON_INTERPRET (interpreter runs),
then `extra` (the only way an `EGG_MCP_*` variable reaches a runner), then EGG_MCP_SANDBOX_ENV, a
marker `confine` pops to report that the allow-list was in force (the judge's runner takes it out of the
environment before the exec and says so in the runner's argv instead: nothing in a runner's environment,
paths or names may tell candidate code that it is being verified).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import egg_mcp
from egg_mcp.config import ENV_MARKER

PACKAGE_PARENT = str(Path(egg_mcp.__file__).resolve().parent.parent)

_ALLOWED_NAMES = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "TERM",
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_MODULE_LOADING", "CUDA_LAUNCH_BLOCKING",
    "CUDA_HOME", "CUDA_PATH", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "LD_LIBRARY_PATH",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
    "TRITON_PTXAS_PATH", "TRITON_CUOBJDUMP_PATH", "TRITON_NVDISASM_PATH", "TRITON_LIBCUDA_PATH",
    "TRITON_LIBDEVICE_PATH",
})
_ALLOWED_PREFIXES = ("LC_",)
_DENIED = re.compile(r"TOKEN|KEY|SECRET|PASSW|CREDENTIAL|^AWS_|^GCP_|^GOOGLE_|^AZURE_|^HF_|^HUGGING|^OPENAI_"
                     r"|^ANTHROPIC_|^EGG_MCP_", re.IGNORECASE)

# Which namespaces are in force travels in argv: launch.py --tell-arg (never in the environment).

# Paths to tools that `confine` must let the runner read (set by a site, passed through above).
TOOL_PATH_VARS = ("TRITON_PTXAS_PATH", "TRITON_CUOBJDUMP_PATH", "TRITON_NVDISASM_PATH", "TRITON_LIBCUDA_PATH",
                  "TRITON_LIBDEVICE_PATH", "CUDA_HOME", "CUDA_PATH")


def allowed(name: str) -> bool:
    """True if `name` may pass from the parent's environment to a runner."""
    if _DENIED.search(name):
        return False
    return name in _ALLOWED_NAMES or name.startswith(_ALLOWED_PREFIXES)


def private_paths(private_dir: Path) -> dict[str, Path]:
    """Every directory the runner may write, all under `private_dir` (created by `runner_env`)."""
    root = Path(private_dir)
    return {
        "HOME": root / "home",
        "TMPDIR": root / "tmp",
        "XDG_CACHE_HOME": root / "cache",
        "XDG_CONFIG_HOME": root / "config",
        "XDG_DATA_HOME": root / "data",
        "XDG_STATE_HOME": root / "state",
        "XDG_RUNTIME_DIR": root / "run",
        "TRITON_CACHE_DIR": root / "cache" / "triton",
        "TORCHINDUCTOR_CACHE_DIR": root / "cache" / "inductor",
        "CUDA_CACHE_PATH": root / "cache" / "nv",
    }


DEPENDENCIES = ("torch", "triton", "numpy", "pydantic", "pydantic_core", "typing_extensions", "annotated_types")


def dependency_roots() -> list[str]:
    """The sys.path entries our runtime dependencies are found in, outside the interpreter's own site dirs
    (those the runner finds anyway): e.g. a `pip install --target` dir on the server's PYTHONPATH."""
    import importlib.util
    import site
    import sys

    standard = {os.path.realpath(p) for p in (*site.getsitepackages(), sys.prefix, sys.base_prefix)}
    roots: list[str] = []
    for name in DEPENDENCIES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
            continue
        origin = Path(spec.origin)
        root = os.path.realpath(origin.parent.parent if origin.name == "__init__.py" else origin.parent)
        if root not in standard and root != os.path.realpath(PACKAGE_PARENT):
            roots.append(root)
    return list(dict.fromkeys(roots))


def runner_env(base_env: Mapping[str, str], private_dir: Path, *, interpreter: bool,
               extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a runner: allow-listed names from `base_env`, private dirs, `extra`.

    Creates the private directories (mode 0700) so that tools find them on first use.
    """
    private_dir = Path(private_dir)
    if not private_dir.is_absolute():
        raise ValueError(f"private_dir must be an absolute path, got {private_dir!s}")
    env = {k: v for k, v in base_env.items() if allowed(k)}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    for name, path in private_paths(private_dir).items():
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        env[name] = str(path)
    env["TMP"] = env["TEMP"] = env["TMPDIR"]
    # The egg_mcp package parent, then wherever our own dependencies are installed (a --target dir on
    # PYTHONPATH, say): never the server's PYTHONPATH as such, which may name anything.
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([PACKAGE_PARENT, *dependency_roots()]))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONNOUSERSITE"] = "1"
    if interpreter:
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    for k, v in (extra or {}).items():
        env[str(k)] = str(v)
    env[ENV_MARKER] = "allowlist"
    return env
