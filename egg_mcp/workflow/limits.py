"""Input limits: every argument is checked here before anything is stored or queued.

The numbers are generous for real use and small enough that one call cannot bloat the workspace
or every later response (a note is echoed in task_status; a name in every result):

| input | limit | why |
| --- | --- | --- |
| task / candidate / report id | 64 chars | ids are `t-` + 8 hex digits; anything longer is not an id |
| task name | 200 chars | a short label shown in every listing |
| note (verify) | 4,000 chars | a paragraph on what the candidate tries |
| decision summary / each change | 1,000 chars | one line each |
| decision rationale | 8,000 chars | a few paragraphs |
| decision changes / evidence | 50 items each | |
| force_reason | 2,000 chars | |
| path (export) | 4,096 chars | PATH_MAX on Linux |
| reference / candidate source | `max_source_bytes` (256 KiB) | a real kernel file is a few KB |
| atol / rtol | a number in 1e-12 .. 1 | 0 or a denormal (1e-320) fails every kernel; above 1 nearly any passes |
| size_overrides (start_task, verify, profile_ncu) | ints 1 .. 2**31-1; estimate <= `max_eval_bytes` (16 GiB) | below |
| dims (propose_tiling) | each an int in 1 .. 2**31-1 | cost-model dimensions |
| k_seeds | int 1 .. 8 | seeds per task |
| max_trials (propose_tiling) | int 1 .. 64 | configs measured |
| time_budget_s (propose_tiling) | number 1 .. 1800 | seconds of measuring; less measures nothing |
| rounds (compare) | int 5 .. 200 | A/B rounds |

Every argument of every tool is strict (`surface.schemas.strict_arguments`): an integer is a JSON integer, a
number a JSON number (an integer is fine where a number is meant), a flag a JSON boolean; no bools for numbers,
no numeric or boolean strings, no NaN or infinity. A refusal is one sentence naming the argument, what was
wrong and what is accepted (`surface.schemas.plain_argument_error`).

The size estimate: the reference analysis measures the bytes the problem moves at its own sizes
(inputs, outputs and parameters once, `min_bytes`); an override scales it by the ratio of new to
default value for every constant it grows (exact for shapes linear in each constant, the common
KernelBench case). Every tool that takes `size_overrides` runs this check before any job starts: start_task
against the analysis at the problem's defaults, verify and profile_ncu (`ServiceCore.check_sizes`) against the
task's stored analysis and the sizes it was taken at (without an analysis there is no estimate; the per-value
bound still holds). The worker holds the inputs, the reference's outputs and the candidate's, about 3x that,
so 16 GiB keeps one evaluation under ~48 GiB: inside an H200's 141 GB and a workstation's RAM.
"""

from __future__ import annotations

import math
from typing import Any

MAX_ID = 64
MAX_NAME = 200
MAX_NOTE = 4000
MAX_LINE = 1000
MAX_RATIONALE = 8000
MAX_ITEMS = 50
MAX_FORCE_REASON = 2000
MAX_PATH = 4096
MIN_TOLERANCE = 1e-12
MAX_TOLERANCE = 1.0
MAX_SIZE_VALUE = 2**31 - 1
MAX_K_SEEDS = 8
MAX_TRIALS = 64
MIN_TIME_BUDGET_S = 1.0
MAX_TIME_BUDGET_S = 1800.0
MIN_COMPARE_ROUNDS = 5
MAX_COMPARE_ROUNDS = 200


class InputError(ValueError):
    """An argument the client must change; the message names it, the limit and what to do."""


def check_text(field: str, value: str | None, limit: int) -> None:
    if value is None:
        return
    if len(value) > limit:
        raise InputError(f"{field} is {len(value)} characters; the limit is {limit}. Shorten it and call again.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{field} contains a lone surrogate code point ({value[exc.start]!r} at position "
                         f"{exc.start}) that is not valid Unicode text; remove it and call again.") from None


def check_id(field: str, value: str) -> None:
    check_text(field, value, MAX_ID)


def check_tolerance(field: str, value: float | None) -> None:
    if value is None:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise InputError(f"{field}={value!r} is not allowed: a tolerance is a number from {MIN_TOLERANCE:g} to "
                         f"{MAX_TOLERANCE:g}, not a {type(value).__name__}. Omit it to use the preset.")
    if not math.isfinite(value) or not MIN_TOLERANCE <= value <= MAX_TOLERANCE:
        raise InputError(f"{field}={value!r} is not allowed: a tolerance is a finite number from {MIN_TOLERANCE:g} to "
                         f"{MAX_TOLERANCE:g} (0, denormals or NaN fail every kernel; above 1 nearly any output "
                         "passes). Omit it to use the preset.")


MAX_SIZE_LIST = 64
"""Elements of one list size constant (layer_sizes) in size_overrides."""


def check_size_values(size_overrides: Any) -> None:
    if not isinstance(size_overrides, dict):
        raise InputError(f"size_overrides={size_overrides!r} is not allowed: it is an object of module-level int "
                         "constant names to integers (or lists of integers for list constants), e.g. "
                         "{\"batch_size\": 8} or {\"layer_sizes\": [64, 32]}")
    for key, value in size_overrides.items():
        check_text("size_overrides key", key, MAX_NAME)
        items = value if isinstance(value, list) else [value]
        if isinstance(value, list) and not 1 <= len(value) <= MAX_SIZE_LIST:
            raise InputError(f"size_overrides[{key!r}] is a list of {len(value)} sizes; a list constant takes 1 to "
                             f"{MAX_SIZE_LIST} integers")
        for item in items:
            if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= MAX_SIZE_VALUE:
                raise InputError(f"size_overrides[{key!r}]={value!r} is not allowed: sizes must be integers from 1 to "
                                 f"{MAX_SIZE_VALUE} (0 or a negative size leaves nothing to compare, so any kernel "
                                 "would pass), or a list of them for a list constant")


def _total(value: Any) -> int:
    return sum(value) if isinstance(value, list) else int(value or 0)


def estimate_bytes(min_bytes: int, defaults: dict[str, Any], overrides: dict[str, Any]) -> int:
    """Bytes the problem moves with `overrides`, scaled from the analysed `min_bytes` at default sizes (a list
    constant by the growth of its sum)."""
    scale = 1.0
    for key, value in overrides.items():
        base = _total(defaults.get(key))
        if base > 0 and _total(value) > base:
            scale *= _total(value) / base
    return int(min_bytes * scale)


def check_size_memory(min_bytes: int | None, defaults: dict[str, Any], overrides: dict[str, Any],
                      limit_bytes: int) -> None:
    if not min_bytes or not overrides:
        return
    est = estimate_bytes(min_bytes, defaults, overrides)
    if est > limit_bytes:
        raise InputError(
            f"size_overrides {overrides} would make the problem move about {est / 2**30:.1f} GiB (the reference "
            f"moves {min_bytes / 2**20:.1f} MiB at its default sizes {defaults}, scaled by each grown constant); "
            f"the limit is {limit_bytes / 2**30:.0f} GiB (the worker holds inputs and two sets of outputs). "
            "Use smaller sizes, or raise --max-eval-gib.")
