"""The sandbox floor: which confinement layers a runner must have before the server lets candidates run.

Default: every layer this kernel offers, and never less than the essential ones (environment allow-list,
no_new_privs, capabilities dropped, Landlock filesystem rules, user+PID namespaces): on a host without
Landlock or user namespaces candidates do not run. An operator lowers the floor knowingly with
`--unsafe-sandbox-floor LEVEL` (or EGG_MCP_UNSAFE_SANDBOX_FLOOR); the weak level is then said at start and
in every result's text. The same floor is checked against each runner's own report (judge side).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from egg_mcp.config import UNSAFE_VAR, sandbox_required
from egg_mcp.sandbox.report import SandboxReport

UNSAFE_FLAG = "--unsafe-sandbox-floor"
UnsafeLevel = Literal["none", "env", "landlock"]

LAYERS: dict[str, str] = {
    "env_allowlist": "environment allow-list",
    "no_new_privs": "no_new_privs",
    "capabilities_dropped": "capabilities dropped",
    "fs_confined": "Landlock filesystem rules",
    "network_confined": "Landlock TCP rules (ABI >= 4)",
    "signals_scoped": "Landlock signal scoping (ABI >= 6)",
    "pid_namespace": "user + PID namespaces",
}
"""Every layer a SandboxReport tracks as a boolean, and its name in messages."""
CONFINE_LAYERS = ("no_new_privs", "capabilities_dropped", "fs_confined", "network_confined", "signals_scoped")
"""What `confine` itself applies: all a worker job that confines its own process (not started by the namespace
launcher nor with the runners' environment) can be held to."""
ESSENTIAL = ("env_allowlist", "no_new_privs", "capabilities_dropped", "fs_confined", "pid_namespace")
BY_LEVEL: dict[str, tuple[str, ...]] = {
    "none": (),
    "env": ("env_allowlist",),
    "landlock": ("env_allowlist", "no_new_privs", "capabilities_dropped", "fs_confined"),
}
"""What an operator's lowered floor still requires."""


def layers_of(report: SandboxReport | Mapping[str, Any]) -> list[str]:
    data = report.model_dump() if isinstance(report, SandboxReport) else dict(report)
    return [name for name in LAYERS if data.get(name)]


def missing_layers(report: SandboxReport | Mapping[str, Any] | None, required: list[str]) -> list[str]:
    """The required layers a report lacks (all of them for no report)."""
    have = set(layers_of(report)) if report is not None else set()
    return [name for name in required if name not in have]


def describe(names: list[str]) -> str:
    return ", ".join(LAYERS.get(n, n) for n in names)


class SandboxFloor(BaseModel):
    """The floor in force for this server, against what this host offers."""

    host_level: str = Field(description="the strongest level this host offers a runner (probe)")
    host_summary: str
    required: list[str] = Field(description="layers every runner must have (SandboxReport field names)")
    missing: list[str] = Field(description="required layers this host does not offer: candidates do not run")
    weak: list[str] = Field(default_factory=list, description="essential layers the host lacks, allowed by the "
                            "operator's unsafe opt-in")
    unsafe_level: UnsafeLevel | None = None
    notes: list[str] = Field(default_factory=list)

    @property
    def runs_candidates(self) -> bool:
        return not self.missing

    def line(self) -> str:
        """One line for serve's stderr and every verify's text."""
        if self.missing:
            return (f"sandbox: {self.host_level}: candidates do not run (missing {describe(self.missing)}); "
                    f"see `egg-mcp doctor`, or opt in knowingly with {UNSAFE_FLAG} {self.host_level}")
        if self.weak:
            without_fs = "fs_confined" in self.weak
            return (f"sandbox: WEAK level {self.host_level}, allowed by {UNSAFE_FLAG} {self.unsafe_level} (missing "
                    f"{describe(self.weak)}): " + ("candidates can read and write every file this server's user "
                                                   "can, the workspace included" if without_fs else
                                                   "candidates can see and signal other processes of this user"))
        lowered = f" (floor lowered to {self.unsafe_level} by {UNSAFE_FLAG}; nothing is missing here)" \
            if self.unsafe_level else ""
        return f"sandbox: {self.host_summary}{lowered}"

    def refusal(self, what: str = "run candidates") -> str:
        """The error a refused call gets: what is missing, how to get it, how to opt in knowingly."""
        fix = "; ".join(self.notes[:2]) or "see docs/sandbox.md"
        return (f"this server does not {what}: its runners' sandbox would be {self.host_level}, below the floor "
                f"(missing: {describe(self.missing)}). To fix the host: {fix}; `egg-mcp doctor` says what it "
                f"offers. To run candidates anyway, knowing they can then reach what this server's user can, "
                f"restart the server with {UNSAFE_FLAG} {self.host_level} (or {UNSAFE_VAR}={self.host_level}).")


def floor_for(host: SandboxReport, unsafe_level: UnsafeLevel | None = None) -> SandboxFloor:
    """Default: every layer the host offers and at least ESSENTIAL; with `unsafe_level`: that level's layers
    plus every other layer the host offers (the operator lowers the floor, never what confine applies)."""
    offered = layers_of(host)
    if unsafe_level is None:
        required = list(dict.fromkeys([*ESSENTIAL, *offered]))
        weak: list[str] = []
    else:
        floor = BY_LEVEL[unsafe_level]
        required = [n for n in LAYERS if n in floor or n in offered]
        weak = [n for n in ESSENTIAL if n not in offered]
    missing = [n for n in required if n not in offered]
    return SandboxFloor(host_level=host.level, host_summary=host.summary(), required=required, missing=missing,
                        weak=weak, unsafe_level=unsafe_level, notes=[n for n in host.notes
                                                                     if not n.startswith("namespaces:")])


def runner_guards(config: Any, extra_protect: Any = ()) -> tuple[SandboxFloor, list[Path]]:
    """How serve (and bench) hold an engine's runners: the floor on this host, and the paths no tool or toolchain
    grant may expose (the workspace, the allowed folders, `extra_protect`; every home directory besides)."""
    from egg_mcp.sandbox.host import probe

    floor = floor_for(probe(), config.unsafe_sandbox_floor)
    return floor, [Path(config.workspace).expanduser(), *config.readable_roots(), *map(Path, extra_protect)]


def required_from_env(raw: str | None) -> list[str]:
    """config.REQUIRED_VAR's value as layer names (unknown names are kept: a runner lacking them is refused)."""
    return [n for n in (raw or "").split(",") if n.strip()]


class BelowFloor(RuntimeError):
    """A confined process lacks a layer the server requires: nothing it was given may run."""


def below_floor(report: Mapping[str, Any] | None, required: list[str] | None = None) -> str | None:
    """Why a runner or job whose confinement `report` says this must not go on, or None. `required`: the
    server's floor (default: config.REQUIRED_VAR in this process's environment, set by the server for its workers;
    absent: nothing is checked here, the server checked its host before it sent the job)."""
    if required is None:
        required = required_from_env(sandbox_required())
    lacks = missing_layers(report, required) if required else []
    if not lacks:
        return None
    level = (report or {}).get("level", "none")
    return (f"the sandboxed process got level {level} without {describe(lacks)}, which this server's sandbox "
            f"floor requires: the candidate was not loaded. Run `egg-mcp doctor` on the machine that runs the "
            f"jobs, or lower the floor knowingly with {UNSAFE_FLAG}")
