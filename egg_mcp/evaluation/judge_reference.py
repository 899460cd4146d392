"""The judge's reference: the problem's module imported in a folder of its own, sizes applied, model built.

Kept apart from judge.py so a failure here is always the reference's (`fault: reference`), never the candidate's.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import torch

from egg_mcp.contract import ErrorReport
from egg_mcp.evaluation.errors import classify
from egg_mcp.evaluation.failures import _failure
from egg_mcp.problems.modules import import_source
from egg_mcp.problems.problem import Problem, apply_size_overrides


class ReferenceFailed(Exception):
    """The reference did not load or build: `result` is the verdict to answer with."""

    def __init__(self, result: dict[str, Any]):
        super().__init__(result.get("summary", "the reference failed"))
        self.result = result


def load_reference(source: str, size_overrides: dict[str, Any], device: str, dtype: torch.dtype,
                   init_seed: int) -> tuple[str, Any, Problem, Any]:
    """(folder name, reference module, Problem, reference model) for `source` at the task's sizes."""
    workdir = Path(os.getcwd()) / f"judge-{secrets.token_hex(4)}"
    workdir.mkdir()
    try:
        reference = import_source(source, workdir / "reference.py", f"egg_reference_{secrets.token_hex(4)}")
        for name in ("Model", "get_inputs", "get_init_inputs"):
            if not hasattr(reference, name):
                raise AttributeError(f"the reference defines no {name}")
    except BaseException as exc:  # noqa: BLE001
        raise ReferenceFailed({**_failure("runtime_error", exc, None, "The reference failed to load"),
                               "fault": "reference"}) from None
    try:
        apply_size_overrides(reference, None, size_overrides)
    except ValueError as exc:
        raise ReferenceFailed({"verdict": "runtime_error", "summary": str(exc), "fault": "reference",
                               "error": ErrorReport(kind="bad_options", message=str(exc)).model_dump()}) from None
    problem = Problem(reference, device, dtype)
    try:
        ref_model = problem.build(reference.Model, problem.init_inputs(init_seed), init_seed)
    except BaseException as exc:  # noqa: BLE001
        raise ReferenceFailed({**_failure(classify(exc), exc, None, "Building the reference model failed"),
                               "fault": "reference"}) from None
    return workdir.name, reference, problem, ref_model
