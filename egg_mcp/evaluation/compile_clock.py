"""The runner's own clock on Triton's compiles (knobs.runtime.jit_cache_hook before, jit_post_compile_hook
after each cache miss), so a verify's `compile_first_trial` phase can be split into "Triton compiling the
candidate's kernels" and the rest.

Why: that phase is the largest of a GPU verify
(benchmarks/results/archive/h200_2026-12-01_0f0ae24-6438ad0/verify_latency_e2454f3.json),
and how much of it is the kernel's own code generation (LLVM + ptxas: no harness can remove it) vs
harness overhead is what a reader needs. The number comes from the runner, where the candidate's code
runs: the judge reports it as `runner_reported_triton_compile_s`, never uses it for a verdict or a timing.
Launcher stubs and module loads are outside these hooks (they happen at the first launch).
The hook also sees each compile's argument-type list: reported as `kernel_signatures`, the judge's hint for
which launcher stubs its next runners build ahead (launchers.py; validated there, never trusted).
"""

from __future__ import annotations

import time
from typing import Any

from egg_mcp.evaluation.launchers import MAX_SIGNATURES, reported, signature_of


class CompileClock:
    """Seconds and count of Triton compiles since install(); chains to hooks already set."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.kernels = 0
        self.signatures: list[list[str]] = []
        self._started: float | None = None

    def install(self) -> bool:
        try:
            from triton import knobs

            runtime = knobs.runtime
            before, after = runtime.jit_cache_hook, runtime.jit_post_compile_hook
        except (ImportError, AttributeError):  # a Triton without knobs hooks: nothing to report
            return False

        def on_miss(*args: Any, **kwargs: Any):
            self._started = time.perf_counter()
            sig = signature_of(kwargs.get("compile"))
            if sig is not None and sig not in self.signatures and len(self.signatures) < MAX_SIGNATURES:
                self.signatures.append(sig)
            return before(*args, **kwargs) if before else False

        def on_compiled(*args: Any, **kwargs: Any):
            if self._started is not None:
                self.seconds += time.perf_counter() - self._started
                self.kernels += 1
                self._started = None
            return after(*args, **kwargs) if after else None

        runtime.jit_cache_hook, runtime.jit_post_compile_hook = on_miss, on_compiled
        return True

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {"triton_compile_s": round(self.seconds, 4), "triton_compiles": self.kernels}
        if self.signatures:
            out["kernel_signatures"] = [list(s) for s in self.signatures]
        return out


def reported_compile_s(message: dict[str, Any]) -> float | None:
    """The judge's reading of a runner's `triton_compile_s` (bounded; anything else: None)."""
    value = message.get("triton_compile_s")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e6:
        return round(float(value), 4)
    return None


def runner_reports(message: dict[str, Any]) -> dict[str, Any]:
    """What the judge shows of a runner's first-trial words: its Triton compile seconds and the launcher stubs
    it built ahead, each bounded and labelled as the runner's (used for nothing)."""
    out: dict[str, Any] = {}
    if (said := reported_compile_s(message)) is not None:
        out["runner_reported_triton_compile_s"] = said
    if (built := reported(message)) is not None:
        out["runner_reported_launchers"] = built
    return out
