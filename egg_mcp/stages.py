"""Stage order and the one table that says which tool may run in which stage.

EGG narrows the search stage by stage: algorithmic structure first (seeds, then fusion and
dataflow), then hardware tuning in three sub-stages (parallel mapping, tiling, memory). Calling a
tool outside its stage is refused with the stage you are in and the next legal step, so a client
cannot skip ahead or tune a kernel whose structure was never chosen.
"""

from __future__ import annotations

from enum import Enum


class Stage(str, Enum):
    SEEDS = "SEEDS"
    ALGORITHM = "ALGORITHM"
    PARALLEL_MAPPING = "PARALLEL_MAPPING"
    TILING = "TILING"
    MEMORY = "MEMORY"
    DONE = "DONE"


STAGE_ORDER: list[Stage] = [
    Stage.SEEDS,
    Stage.ALGORITHM,
    Stage.PARALLEL_MAPPING,
    Stage.TILING,
    Stage.MEMORY,
    Stage.DONE,
]

STAGE_GOALS: dict[Stage, str] = {
    Stage.SEEDS: "write k structurally different seed kernels, verify each, commit the fastest correct one",
    Stage.ALGORITHM: "semantics-preserving rewrites of the chosen structure: operator fusion, dataflow reorganisation",
    Stage.PARALLEL_MAPPING: "map problem dimensions onto the grid: program ids, SM utilisation, waves",
    Stage.TILING: "choose block sizes, num_warps and tile shapes: registers and shared memory vs reuse",
    Stage.MEMORY: "coalescing, vector widths, num_stages / multi-buffering, cache hints",
    Stage.DONE: "finished: export the kernel or start a new task",
}

ANY_STAGE = frozenset(STAGE_ORDER)
WORKING_STAGES = frozenset(STAGE_ORDER[:-1])

# The one table: tool name -> stages in which it may be called.
TOOL_STAGES: dict[str, frozenset[Stage]] = {
    "start_task": ANY_STAGE,
    "list_tasks": ANY_STAGE,
    "task_status": ANY_STAGE,
    "get_context": ANY_STAGE,
    "export_kernel": ANY_STAGE,
    "get_candidate": ANY_STAGE,
    "verify": ANY_STAGE,
    "compare": ANY_STAGE,
    "generate_seeds": frozenset({Stage.SEEDS}),
    "profile_ncu": WORKING_STAGES,
    "propose_tiling": frozenset({Stage.TILING, Stage.MEMORY}),
    "commit_stage": WORKING_STAGES,
}

# What a client should do next in each stage (used in refusals and in every status).
NEXT_STEP: dict[Stage, str] = {
    Stage.SEEDS: "call generate_seeds, write k structurally different ModelNew seeds, verify each, "
    "then commit_stage with the fastest correct candidate",
    Stage.ALGORITHM: "fuse and reorganise the committed kernel, verify each rewrite, profile_ncu to find the "
    "bottleneck, then commit_stage",
    Stage.PARALLEL_MAPPING: "change how program ids map onto the problem (grid shape, persistent programs), "
    "verify, profile_ncu, then commit_stage",
    Stage.TILING: "call propose_tiling for ranked block sizes, verify the recommended candidate, then commit_stage",
    Stage.MEMORY: "fix access patterns and pipelining (coalescing, num_stages), verify, profile_ncu, then commit_stage",
    Stage.DONE: "call export_kernel to write the final ModelNew file, or start_task for a new problem",
}


def next_stage(stage: Stage) -> Stage:
    if stage is Stage.DONE:
        raise ValueError("the task is already DONE")
    return STAGE_ORDER[STAGE_ORDER.index(stage) + 1]


def allowed(tool: str, stage: Stage) -> bool:
    return stage in TOOL_STAGES[tool]


def tools_allowed(stage: Stage) -> list[str]:
    return sorted(t for t, stages in TOOL_STAGES.items() if stage in stages)


def refusal(tool: str, stage: Stage) -> str:
    """The message for an out-of-stage call: where you are and what is legal now."""
    legal = tools_allowed(stage)
    where = ", ".join(s.value for s in STAGE_ORDER if s in TOOL_STAGES[tool])
    return (
        f"{tool} is not allowed in stage {stage.value} (allowed in: {where}). "
        f"Next step: {NEXT_STEP[stage]}. Tools available now: {', '.join(legal)}."
    )
