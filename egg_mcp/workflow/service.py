"""The workflow service: every tool's logic as a plain async method, testable without MCP.

The MCP layer (server/) only translates arguments and errors. This package owns the rules of EGG:
stage order, the regression guard on commit, selective handoff, idempotent verification. Each job
has its own module (core.py: rows, options, baselines, briefs; tasks.py: start_task, generate_seeds;
verify.py; commit.py: commit_stage + guard; views.py: status, context, export, reports;
profile_tiling.py); this module composes them and is the one import place.
"""

from __future__ import annotations

from egg_mcp.workflow.commit import MIN_NOISE, Commits
from egg_mcp.workflow.core import ServiceCore, WorkflowError
from egg_mcp.workflow.profile_tiling import problem_dims, profile, tiling
from egg_mcp.workflow.tasks import TaskLifecycle
from egg_mcp.workflow.verify import Verification
from egg_mcp.workflow.views import Views

__all__ = ["EggService", "MIN_NOISE", "ServiceCore", "WorkflowError", "problem_dims", "profile", "tiling"]


class EggService(TaskLifecycle, Verification, Commits, Views):
    """Every tool of the workflow, on one workspace and one evaluator (see the mixins' modules)."""
