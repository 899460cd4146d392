"""The demo's plan: which shipped kernel (`demo_kernels/<problem>/`) goes into which stage, and why,
plus the source edits the scripted client makes (carried tunables, one constant changed)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

KERNELS_DIR = Path(__file__).resolve().parent / "demo_kernels"
TUNABLE_LINE = re.compile(r"^(?P<name>[A-Z][A-Z0-9_]*)\s*=\s*(?P<value>\d+)\b", re.MULTILINE)


class DemoError(RuntimeError):
    """The scripted workflow could not go on (a tool failed, or a shipped kernel is wrong)."""


# -- the plan: which shipped kernel goes into which stage, and why --------------------------------


@dataclass(frozen=True)
class Step:
    """One stage of the scripted run."""

    stage: str
    kernels: tuple[str, ...]
    summary: str
    changes: tuple[str, ...]
    rationale: str
    profile_committed: bool = False
    """profile the committed kernel first (the Profile role's evidence for this stage's change)"""
    tiling: bool = False
    """call propose_tiling on the stage's kernel and verify its recommended source"""
    carry_tunables: bool = False
    """copy the committed kernel's UPPERCASE int constants into this stage's kernels"""
    gpu_variants: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """constant -> extra values to try, only when timings exist (they change nothing in the interpreter)"""


@dataclass(frozen=True)
class DemoPlan:
    problem: str
    seeds: tuple[tuple[str, str], ...]  # (file, paradigm)
    steps: tuple[Step, ...]


PLANS: dict[str, DemoPlan] = {
    "softmax": DemoPlan(
        problem="softmax",
        seeds=(
            ("seed_row_in_registers.py", "row in registers, one program per row"),
            ("seed_online_blocked.py", "online single pass over column blocks, then a write pass"),
            ("seed_split_row.py", "split row: partial statistics kernel + normalise kernel"),
        ),
        steps=(
            Step("ALGORITHM", ("algorithm_exp2_reciprocal.py",),
                 "exp via exp2 on log2(e)-scaled input; one reciprocal per row instead of a divide per element",
                 ("tl.exp(x - max) -> tl.exp2((x - max) * log2(e))", "y = num / sum -> y = num * (1 / sum)"),
                 "fewer special-function and divide instructions per element; same data movement"),
            Step("PARALLEL_MAPPING", ("mapping_persistent_rows.py",),
                 "persistent grid of PROGRAMS_PER_SM programs per SM looping over multi-row tiles",
                 ("grid (n_rows,) -> (min(n_tiles, SMs * PROGRAMS_PER_SM),)",
                  "tiles of max(1, 4096 // BLOCK_COLS) rows: several rows per program when rows are narrow"),
                 "one short program per row leaves a tail wave and pays set-up per row; a persistent grid keeps "
                 "every SM busy", profile_committed=True),
            Step("TILING", ("tiling_tuning_space.py",),
                 "tile configuration chosen by propose_tiling over the declared TUNING_SPACE",
                 ("TUNING_SPACE declares NUM_WARPS x PROGRAMS_PER_SM",),
                 "registers per thread vs latency hiding (warps) and resident programs per SM (grid size)",
                 tiling=True),
            Step("MEMORY", ("memory_pipelined_hints.py",),
                 "software-pipelined persistent loop (num_stages) with streaming cache hints",
                 ("for tile in tl.range(..., num_stages=NUM_STAGES)", "tl.load(..., eviction_policy='evict_first')",
                  "tl.store(..., cache_modifier='.cs')"),
                 "x and y are touched once: overlap the next tile's load with this tile's math and keep L2 for "
                 "data still to come", profile_committed=True, carry_tunables=True,
                 gpu_variants={"NUM_STAGES": (3,)}),
        ),
    ),
}


def available_problems() -> list[str]:
    return sorted(PLANS)


def kernel_source(problem: str, file: str) -> str:
    return (KERNELS_DIR / problem / file).read_text()


def carry_tunables(committed_source: str, target_source: str) -> tuple[str, dict[str, int]]:
    """Copy the committed kernel's module-level UPPERCASE int constants into `target_source` where it
    defines the same names: a later stage starts from the configuration an earlier one committed."""
    committed = {m["name"]: int(m["value"]) for m in TUNABLE_LINE.finditer(committed_source)}
    carried: dict[str, int] = {}

    def swap(m: re.Match) -> str:
        name = m["name"]
        if name in committed and committed[name] != int(m["value"]):
            carried[name] = committed[name]
            return f"{name} = {committed[name]}"
        return m.group(0)

    return TUNABLE_LINE.sub(swap, target_source), carried


def set_constant(source: str, name: str, value: int) -> str:
    """Rewrite the module-level `NAME = <int>` line (the first one)."""
    pattern = re.compile(rf"^{re.escape(name)}\s*=\s*\d+\b", re.MULTILINE)
    if not pattern.search(source):
        raise DemoError(f"the demo kernel has no module-level constant {name}")
    return pattern.sub(f"{name} = {value}", source, count=1)
