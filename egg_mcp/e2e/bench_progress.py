"""`egg-mcp bench`'s progress bar: problems done, elapsed, throughput (candidates per hour), the last verdict."""

from __future__ import annotations

import sys
import time

from egg_mcp.e2e.bench_results import ProblemResult


def per_hour(done: int, seconds: float) -> float | None:
    """Throughput in candidates per hour, measured over `seconds` of this run (None before the first result)."""
    return done * 3600.0 / seconds if done and seconds > 0 else None


class Progress:
    """A one-line progress bar on stderr (a line per problem when stderr is not a terminal)."""

    def __init__(self, total: int, *, enabled: bool = True, stream=None, lanes: int = 1):
        self.total = total
        self.done = 0
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.lanes = lanes
        self.t0 = time.monotonic()

    def throughput(self) -> float | None:
        return per_hour(self.done, time.monotonic() - self.t0)

    def update(self, result: ProblemResult) -> None:
        self.done += 1
        if not self.enabled:
            return
        width = 24
        filled = int(width * self.done / max(1, self.total))
        speed = f" {result.speedup_vs_eager:.2f}x" if result.speedup_vs_eager else ""
        rate = self.throughput()
        rate_text = f" {rate:.0f}/h on {self.lanes} lane(s)" if rate else ""
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                f"{time.monotonic() - self.t0:.0f}s{rate_text}  {result.key}: {result.verdict}{speed}")
        if self.tty:
            self.stream.write("\r\033[K" + line + ("\n" if self.done >= self.total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
