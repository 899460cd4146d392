"""What a persistent judge (judge_host.py) keeps between verify jobs of one task, and the key it is kept by.

Held: the reference module's loaded model (its weights, built once from the judge's init seed), the
Problem (how inputs are made), and the reference's GPU timing for up to REFERENCE_TIMING_MAX_AGE_S.
Not held: inputs and reference outputs. Every verify draws fresh seeds, so a candidate that learned
an earlier verify's inputs (it can print them into its log tail) cannot recognise the next one's; the
judge computes each trial's reference output while the runner works, so holding outputs would save no
wall time. Nothing held is reachable by a runner: it lives in the judge's (non-dumpable) memory and
the judge's own directory, which a confined runner cannot write.

The key is torch-free: the engine (server side) routes jobs by it.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

REFERENCE_TIMING_MAX_AGE_S = 300.0
"""A held reference timing is reused for this long (the GPU's clocks and neighbours drift); then measured again."""
MAX_HELD_BYTES = 8 << 30
"""A reference model with more parameter/buffer bytes than this is not held (the judge reloads it per job)."""


def reference_key(payload: dict[str, Any]) -> str:
    """What a held reference depends on: its source, the dtype and the size overrides."""
    opts = payload.get("options") or {}
    blob = json.dumps([payload.get("reference_source", ""), opts.get("dtype"), opts.get("size_overrides")],
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(eq=False)
class HeldReference:
    key: str
    problem: Any
    ref_model: Any
    init_seed: int
    dirname: str
    loaded_at: float = field(default_factory=time.monotonic)
    timing: Any = None  # TimingStats of the reference
    timing_runs: int | None = 0
    timed_at: float = 0.0
    jobs: int = 0
    exchange: Any = None  # the shared output region (exchange.py): sized to this reference's outputs, kept

    @property
    def files(self) -> set[str]:
        """Entries of the judge's cwd that belong to the held reference (kept by the between-job clean-up)."""
        return {self.dirname}

    def held_timing(self, n_runs: int | None):
        """(TimingStats, age_s) when a timing at this run count is fresh enough to reuse, else None."""
        age = time.monotonic() - self.timed_at
        if self.timing is not None and self.timing_runs == n_runs and age <= REFERENCE_TIMING_MAX_AGE_S:
            return self.timing, age
        return None

    def keep_timing(self, stats, n_runs: int | None) -> None:
        self.timing, self.timing_runs, self.timed_at = stats, n_runs, time.monotonic()

    def after_job(self) -> None:
        """Give the job's cached CUDA blocks back (the next runner needs the memory); count the job."""
        from egg_mcp.evaluation.gpu_cache import release_all

        self.jobs += 1
        release_all()


def model_bytes(model: Any) -> int:
    try:
        return sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    except Exception:  # noqa: BLE001 - not a module: nothing large held
        return 0
