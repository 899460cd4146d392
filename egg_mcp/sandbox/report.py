"""What sandbox was in force for one runner (or what this host can offer), as data every result carries."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Level = Literal["none", "env", "landlock", "landlock+ns"]


class SandboxReport(BaseModel):
    """The strongest confinement applied (or available), and what is missing.

    `level` is the headline: "none" (nothing), "env" (allow-listed environment only), "landlock"
    (env + no_new_privs + Landlock filesystem rules), "landlock+ns" (that, inside its own user/PID
    namespaces, so the runner cannot even see the server, the judge or its siblings).
    """

    level: Level = "none"
    env_allowlist: bool = False
    landlock_abi: int | None = None
    fs_confined: bool = False
    signals_scoped: bool = False
    pid_namespace: bool = False
    no_new_privs: bool = False
    # Additions to SANDBOX_API.md (see the note at its top):
    network_confined: bool = False      # TCP bind/connect denied (Landlock ABI >= 4)
    capabilities_dropped: bool = False  # the runner holds no capability (a root runner's sets are emptied)
    unconfined_threads: int = 0         # threads that existed before confine and stay outside the Landlock domain
    abstract_sockets_scoped: bool = False  # abstract unix sockets scoped to the domain (ABI >= 6; off when wrapped)
    tcp_ports_allowed: list[int] = Field(default_factory=list)  # TCP ports a tool-wrapped process may use
    notes: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        """One line for logs, results and `doctor`."""
        bits = [self.level]
        if self.landlock_abi is not None:
            bits.append(f"Landlock ABI {self.landlock_abi}")
        flags = [name for name, on in (("env allow-list", self.env_allowlist), ("fs", self.fs_confined),
                                       ("signals", self.signals_scoped), ("tcp", self.network_confined),
                                       ("pid ns", self.pid_namespace), ("no_new_privs", self.no_new_privs),
                                       ("caps dropped", self.capabilities_dropped)) if on]
        if flags:
            bits.append(", ".join(flags))
        return "; ".join(bits)
