"""profile_ncu: Nsight Compute metrics turned into a bottleneck report (with a no-counter fallback).

Server side (no torch import): `profile_candidate` (profile_job), the ncu command (ncu_command), `ProfileReport`
(profile_report) built from the job's readings (report_build), the stage metric table (metrics), the CSV
parser (ncu_csv), the classifier (classify, its rules in bottleneck) and the occupancy calculator (occupancy).
Worker side: `target.run_forward`, run through `Evaluator.run_job`.
"""

from egg_mcp.profiling.ncu_command import find_ncu
from egg_mcp.profiling.profile_job import ProfileError, profile_candidate
from egg_mcp.profiling.profile_report import ProfileReport

__all__ = ["ProfileError", "ProfileReport", "find_ncu", "profile_candidate"]
