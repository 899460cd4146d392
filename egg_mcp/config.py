"""Server configuration: where the workspace lives, which files may be read, and hard limits.

Everything a user can set comes from CLI flags or `EGG_MCP_*` environment variables, so that a
Claude Desktop JSON snippet and a shell session configure the server the same way. This is the one module that
reads the environment (tests/test_config_env_reads.py); it imports only the standard library (`ServerConfig`, a
pydantic model, is built on first use), since sandboxed runners read their environment through it too.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

# ------------------------------------------------------------------------------- environment variables
# The only module that reads the process's environment: every variable is named once here, and read (lazily, at the
# moment its caller needs it) by a function below. Processes that talk through a child's environment write it with
# these names.

WORKSPACE_VAR = "EGG_MCP_WORKSPACE"
SCRATCH_VAR = "EGG_MCP_SCRATCH"
KERNELBENCH_DIR_VAR = "EGG_MCP_KERNELBENCH_DIR"
ALLOWED_ROOTS_VAR = "EGG_MCP_ALLOWED_ROOTS"
FORCE_INTERPRETER_VAR = "EGG_MCP_FORCE_INTERPRETER"
RAY_VAR = "EGG_MCP_RAY"
ISOLATED_TIMING_VAR = "EGG_MCP_ISOLATED_TIMING"
COMPILE_TIMEOUT_VAR = "EGG_MCP_COMPILE_TIMEOUT_S"
RUN_TIMEOUT_VAR = "EGG_MCP_RUN_TIMEOUT_S"
RUN_TIMEOUT_FLOOR_VAR = "EGG_MCP_RUN_TIMEOUT_FLOOR_S"
ANALYSIS_TIMEOUT_VAR = "EGG_MCP_ANALYSIS_TIMEOUT_S"
MAX_EVAL_GIB_VAR = "EGG_MCP_MAX_EVAL_GIB"
LOG_LEVEL_VAR = "EGG_MCP_LOG_LEVEL"
TOKEN_VAR = "EGG_MCP_TOKEN"
JUDGE_VAR = "EGG_MCP_JUDGE"
"""How verify runs: a persistent judge pool or one worker per job (evaluation.engine.judge_mode_from)."""
SPARE_WORKERS_VAR = "EGG_MCP_SPARE_WORKERS"
"""Pre-started spare workers per mode of the server's engines (cluster.lanes.build_engine; unset: the engine's default,
1). The test suite sets 0: its servers live for a few jobs, so a spare (a judge with its runner template, ~8 CPU-s
on the interpreter) is mostly killed unused at the end."""
NCU_VAR = "EGG_MCP_NCU"
COMPUTE_SANITIZER_VAR = "EGG_MCP_COMPUTE_SANITIZER"
UNSAFE_VAR = "EGG_MCP_UNSAFE_SANDBOX_FLOOR"
REQUIRED_VAR = "EGG_MCP_SANDBOX_REQUIRED"
"""Comma-joined layers the server requires; set in its workers' environment, checked by the judge."""
PROTECT_VAR = "EGG_MCP_SANDBOX_PROTECT"
"""os.pathsep-joined paths no tool or toolchain grant may cover (the server's workspace and allowed folders): set by
the server in its workers' environment, popped by whoever confines (runner_env never passes EGG_MCP_* on)."""
ENV_MARKER = "EGG_MCP_SANDBOX_ENV"  # runner_env -> confine: "allowlist" (popped by confine)
TOOL_IPC_VAR = "EGG_MCP_TOOL_IPC"
"""'open': let the tool's injection use its TCP ports and abstract sockets (see evaluation.tool_confine)."""
SERVER_PID_VAR = "EGG_MCP_SERVER_PID"
"""Set by the server in its workers' environment: their watchdog ends them when the server is gone."""
EXTRA_JOB_TARGETS_VAR = "EGG_MCP_EXTRA_JOB_TARGETS"
"""Comma-joined module prefixes (tests.doubles) whose functions a worker may run besides egg_mcp's: test doubles
never ship, so only the test suite and the benchmarks that use one set it."""
EXCHANGE_FROM_BYTES_VAR = "EGG_MCP_EXCHANGE_FROM_BYTES"
"""Outputs from this size go through shared memory (evaluation/exchange.py); tests set 1."""
EXCHANGE_GPU_PEAK_VAR = "EGG_MCP_EXCHANGE_GPU_PEAK_PER_BYTE"
"""The judge's and runner's GPU peak per output byte that decides whether the shared region can be GPU memory
(evaluation/exchange.py's measured default); benchmarks set 0.01 to force the GPU region and measure the peak."""
XDG_DATA_HOME_VAR = "XDG_DATA_HOME"
TRITON_INTERPRET_VAR = "TRITON_INTERPRET"
TRITON_CACHE_DIR_VAR = "TRITON_CACHE_DIR"
CUDA_VISIBLE_DEVICES_VAR = "CUDA_VISIBLE_DEVICES"
PYTHONPATH_VAR = "PYTHONPATH"
CC_VAR = "CC"
RAY_ADDRESS_VAR = "RAY_ADDRESS"
RAY_TMPDIR_VAR = "RAY_TMPDIR"
TMPDIR_VAR = "TMPDIR"


def environment_copy() -> dict[str, str]:
    """This process's whole environment, copied: the base of a child's environment, or a mapping to look names up in."""
    return dict(os.environ)


def log_level_setting() -> str:
    return os.environ.get(LOG_LEVEL_VAR, "INFO")


def ray_setting() -> str | None:
    """$EGG_MCP_RAY as set (`--ray`'s default)."""
    return os.environ.get(RAY_VAR)


def token_setting() -> str | None:
    return os.environ.get(TOKEN_VAR)


def judge_setting() -> str | None:
    return os.environ.get(JUDGE_VAR)


def spare_workers_setting() -> int | None:
    """$EGG_MCP_SPARE_WORKERS as a count of spares (None when unset or not a whole number >= 0)."""
    value = os.environ.get(SPARE_WORKERS_VAR, "").strip()
    return int(value) if value.isdigit() else None


def watched_server_pid() -> str:
    """The server's pid as its workers were told it ("" when not started by a server)."""
    return os.environ.get(SERVER_PID_VAR, "")


def sandbox_required() -> str | None:
    return os.environ.get(REQUIRED_VAR)


def take_sandbox_required() -> str | None:
    """REQUIRED_VAR, removed from this process's environment (a worker, before the job's code runs)."""
    return os.environ.pop(REQUIRED_VAR, None)


def sandbox_protect() -> str | None:
    return os.environ.get(PROTECT_VAR)


def take_sandbox_protect() -> str:
    """PROTECT_VAR, removed from this process's environment (whoever confines, before job or candidate code)."""
    return os.environ.pop(PROTECT_VAR, "")


def take_env_marker() -> str:
    """runner_env's ENV_MARKER, removed from this process's environment so the candidate never sees it."""
    return os.environ.pop(ENV_MARKER, "")


def take_tool_ipc() -> str:
    """TOOL_IPC_VAR, removed from this process's environment before any job code runs."""
    return os.environ.pop(TOOL_IPC_VAR, "")


def extra_job_targets() -> list[str]:
    """The module prefixes EXTRA_JOB_TARGETS_VAR allows besides egg_mcp (none unless it is set)."""
    return [p.strip() for p in os.environ.get(EXTRA_JOB_TARGETS_VAR, "").split(",") if p.strip()]


def triton_interpret() -> bool:
    """Whether this process runs Triton's CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get(TRITON_INTERPRET_VAR) == "1"


def set_triton_interpret() -> None:
    """Make Triton in this process use its CPU interpreter (read by Triton when a kernel is first launched)."""
    os.environ[TRITON_INTERPRET_VAR] = "1"


def triton_cache_dir() -> str | None:
    return os.environ.get(TRITON_CACHE_DIR_VAR)


def set_triton_cache_dir(path: str | None) -> None:
    """Point Triton's cache in this process at `path` (None: unset)."""
    if path is None:
        os.environ.pop(TRITON_CACHE_DIR_VAR, None)
    else:
        os.environ[TRITON_CACHE_DIR_VAR] = path


def cuda_visible_devices() -> str | None:
    return os.environ.get(CUDA_VISIBLE_DEVICES_VAR)


def c_compiler() -> str | None:
    """$CC, the C compiler a site chose (Triton builds its launcher with it)."""
    return os.environ.get(CC_VAR)


def ray_address() -> str:
    """Ray's own RAY_ADDRESS, stripped ("" when unset)."""
    return os.environ.get(RAY_ADDRESS_VAR, "").strip()


def ray_temp_dir() -> str:
    """Where Ray keeps its session files by default: $RAY_TMPDIR, else $TMPDIR, else /tmp."""
    return os.environ.get(RAY_TMPDIR_VAR) or os.environ.get(TMPDIR_VAR) or "/tmp"


def replace_environment(env: dict[str, str]) -> None:
    """This process's environment becomes `env`, nothing else (a runner forked from the runners' template takes
    its own; the C-level environment follows, for the libraries and children that read it there)."""
    os.environ.clear()
    os.environ.update(env)


def drop_own_environment(package_parent: str) -> None:
    """Leave no trace of egg-mcp in this process's environment: PYTHONPATH keeps only the dirs other than
    `package_parent` (compared by real path), and every EGG_MCP* variable goes."""
    kept = [p for p in os.environ.get(PYTHONPATH_VAR, "").split(os.pathsep)
            if p and os.path.realpath(p) != package_parent]
    if kept:
        os.environ[PYTHONPATH_VAR] = os.pathsep.join(kept)
    else:
        os.environ.pop(PYTHONPATH_VAR, None)
    for name in [n for n in os.environ if n.upper().startswith("EGG_MCP")]:
        os.environ.pop(name, None)


def workspace_setting(env: Mapping[str, str] | None = None) -> str | None:
    """$EGG_MCP_WORKSPACE as set (in `env`, default this process's environment)."""
    return (os.environ if env is None else env).get(WORKSPACE_VAR)


# ------------------------------------------------------------------------------- paths and limits


def default_workspace_dir() -> Path:
    """Per-user data directory (XDG on Linux, ~/Library on macOS)."""
    env = os.environ.get(WORKSPACE_VAR)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get(XDG_DATA_HOME_VAR)
    if xdg:
        return Path(xdg) / "egg-mcp"
    home = Path.home()
    mac = home / "Library" / "Application Support"
    if mac.is_dir():
        return mac / "egg-mcp"
    return home / ".local" / "share" / "egg-mcp"


def default_scratch_dir(workspace: Path) -> Path:
    """Where workers' folders go (runners' private dirs go to the system temp dir): $EGG_MCP_SCRATCH, else
    `<temp>/egg-mcp-<uid>/<hash of the workspace path>`, outside the workspace, so whatever a job writes never
    fills the disk the workspace's database lives on by accident, and never lands beside its artifacts.
    One folder per workspace: two servers on one machine with different workspaces never share one."""
    env = os.environ.get(SCRATCH_VAR)
    if env:
        return Path(env).expanduser()
    import hashlib
    import tempfile

    key = hashlib.sha256(str(Path(workspace).expanduser().resolve()).encode()).hexdigest()[:12]
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"egg-mcp-{uid}" / key


def _env_paths(name: str) -> list[Path]:
    raw = os.environ.get(name, "")
    return [Path(p).expanduser() for p in raw.split(os.pathsep) if p.strip()]


def _env_float(name: str, default: float) -> float:
    """A positive number from `name`, or `default`; a bad value is an error naming the variable."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number (seconds)") from None
    if not (value > 0 and value < float("inf")):
        raise ValueError(f"{name}={raw!r} must be a finite number > 0")
    return value


def output_exchange_from_bytes() -> int:
    """Reference outputs from this size go from runner to judge through shared memory (evaluation/exchange.py):
    $EGG_MCP_EXCHANGE_FROM_BYTES, else 64 MiB (tests lower it to send small outputs that way)."""
    return int(_env_float(EXCHANGE_FROM_BYTES_VAR, float(64 << 20)))


def exchange_gpu_peak_per_byte(default: float) -> float:
    """What the judge and the runner hold on the GPU at their peak per byte of output:
    $EGG_MCP_EXCHANGE_GPU_PEAK_PER_BYTE, else `default` (exchange.GPU_PEAK_PER_OUTPUT_BYTE, measured on the H200)."""
    return _env_float(EXCHANGE_GPU_PEAK_VAR, default)


RUN_LIMIT_FACTOR = 100
"""A candidate 100x slower than eager PyTorch is already a verdict: no need to wait longer."""
CALLS_PER_VERIFY = 200
"""Forward calls a verify job makes at most, roughly: correctness trials, warm-up and the timing loop."""


def derived_run_timeout(eager_ms: float | None, floor_s: float, ceiling_s: float) -> float:
    """Run-phase limit of one verify: clamp(100 x eager time x calls per verify, floor, ceiling).

    Without a measured eager time (no GPU) the ceiling (the configured run limit) applies."""
    if eager_ms is None or not eager_ms > 0:
        return ceiling_s
    derived = RUN_LIMIT_FACTOR * CALLS_PER_VERIFY * eager_ms / 1000.0
    return max(min(derived, ceiling_s), min(floor_s, ceiling_s))


def _server_config_model() -> Any:
    from pydantic import BaseModel, Field

    class ServerConfig(BaseModel):
        """Everything the server needs to know before it accepts a call."""

        workspace: Path = Field(default_factory=default_workspace_dir)
        kernelbench_dir: Path | None = Field(
            default_factory=lambda: Path(os.environ[KERNELBENCH_DIR_VAR]).expanduser()
            if os.environ.get(KERNELBENCH_DIR_VAR)
            else None
        )
        allowed_roots: list[Path] = Field(default_factory=lambda: _env_paths(ALLOWED_ROOTS_VAR))
        max_source_bytes: int = 256 * 1024
        """Largest reference or candidate source accepted (a real kernel file is a few KB)."""
        force_interpreter: bool = Field(
            default_factory=lambda: os.environ.get(FORCE_INTERPRETER_VAR, "") not in ("", "0")
        )
        """Evaluate with TRITON_INTERPRET=1 on the CPU even when a GPU is present (tests, debugging)."""
        ray_address: str | None = Field(default_factory=lambda: ray_setting() or None)
        """Cluster mode (`--ray auto|ADDRESS`, $EGG_MCP_RAY): evaluation jobs go to lanes on this Ray cluster."""
        isolated_timing: bool = Field(
            default_factory=lambda: os.environ.get(ISOLATED_TIMING_VAR, "1").strip() not in ("0", "false", "no")
        )
        """Also time each verified candidate's kernels per call from a clean L2 with CUPTI timestamps, the
        condition ncu measures (~0.03-0.04 s per verify on the H200); EGG_MCP_ISOLATED_TIMING=0 turns it off."""
        compile_timeout_s: float = Field(default_factory=lambda: _env_float(COMPILE_TIMEOUT_VAR, 120.0), gt=0)
        """Limit on loading and compiling a candidate (Triton JIT of every kernel); EGG_MCP_COMPILE_TIMEOUT_S."""
        run_timeout_s: float = Field(default_factory=lambda: _env_float(RUN_TIMEOUT_VAR, 300.0), gt=0)
        """Ceiling of the run phase of one verify (EGG_MCP_RUN_TIMEOUT_S); the limit actually used is
        derived from the reference's measured eager time (see `derived_run_timeout`)."""
        run_timeout_floor_s: float = Field(default_factory=lambda: _env_float(RUN_TIMEOUT_FLOOR_VAR, 30.0), gt=0)
        """Floor of the derived run limit (EGG_MCP_RUN_TIMEOUT_FLOOR_S): process and timer overheads."""
        analysis_timeout_s: float = Field(default_factory=lambda: _env_float(ANALYSIS_TIMEOUT_VAR, 120.0), gt=0)
        """Limit on start_task's reference analysis (EGG_MCP_ANALYSIS_TIMEOUT_S)."""
        max_eval_bytes: int = Field(
            default_factory=lambda: int(_env_float(MAX_EVAL_GIB_VAR, 16.0) * 2**30), gt=0)
        """Largest estimated problem footprint size_overrides may ask for (EGG_MCP_MAX_EVAL_GIB, default 16)."""

        # The operator's word, taken as given (an unknown level fails in sandbox.floor.floor_for).
        unsafe_sandbox_floor: Literal["none", "env", "landlock"] | None = Field(  # pyright: ignore[reportAssignmentType]
            default_factory=lambda: os.environ.get(UNSAFE_VAR, "").strip() or None)
        """Lower the sandbox floor to this level (`--unsafe-sandbox-floor`, EGG_MCP_UNSAFE_SANDBOX_FLOOR): candidates
        then run on a host without Landlock or user namespaces, and every result's text says the weak level. Default
        (None): every layer the kernel offers, at least Landlock + user/PID namespaces (egg_mcp.sandbox.floor)."""

        scratch: Path | None = None
        """Workers' folders: None means `default_scratch_dir(workspace)` (EGG_MCP_SCRATCH, else the temp dir)."""

        def scratch_dir(self) -> Path:
            return Path(self.scratch) if self.scratch is not None else default_scratch_dir(self.workspace)

        def readable_roots(self) -> list[Path]:
            roots = [r.resolve() for r in self.allowed_roots]
            if self.kernelbench_dir is not None:
                roots.append(self.kernelbench_dir.resolve())
            return roots

    ServerConfig.__qualname__ = "ServerConfig"
    return ServerConfig


_model_lock = threading.Lock()


def __getattr__(name: str) -> Any:
    """`ServerConfig` is built on first use: importing config.py costs no pydantic, so a runner, which reads its
    environment through this module, still starts without it (tests/test_sandbox.py)."""
    if name != "ServerConfig":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _model_lock:
        if "ServerConfig" not in globals():
            globals()["ServerConfig"] = _server_config_model()
    return globals()["ServerConfig"]
