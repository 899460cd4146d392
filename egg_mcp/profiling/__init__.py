"""profile_ncu: Nsight Compute metrics turned into a bottleneck report (with a no-counter fallback).

Server side (no torch import): `profile_candidate` (runner), `ProfileReport` (models), the stage
metric table (metrics), the CSV parser (ncu_csv), the classifier (classify, its rules in bottleneck) and
the occupancy calculator (occupancy). Worker side: `target.run_forward`, run through `Evaluator.run_job`.
"""

from egg_mcp.profiling.models import ProfileReport
from egg_mcp.profiling.runner import ProfileError, find_ncu, profile_candidate

__all__ = ["ProfileError", "ProfileReport", "find_ncu", "profile_candidate"]
