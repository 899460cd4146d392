"""Each session-9 term of the streaming model switched back to its session-8 form, one at a time, scored by
score.py (runs A / B replayed, the full exhaustive space, the subset run.py tiling_search would pick).

    python3 benchmarks/results/tiling/s9_probes/ablate.py > benchmarks/results/tiling/s9_probes/ablation.md"""
import contextlib
import io
import runpy
import sys
from pathlib import Path

sys.path.insert(0, '.')
from egg_mcp.tiling import costs  # noqa: E402

SCORE = str(Path(__file__).with_name('score.py'))
VARIANTS = [
    ("the model (all terms)", {}),
    ("no register spread (REG_SPREAD 0)", {"REG_SPREAD": 0.0}),
    ("session-8 occupancy registers (24 + live/element)", {"OCC_REGS": (24.0, 1.4, 0.0, 0.0)}),
    ("no per-warp ILP (WARP_ILP off)", {"WARP_ILP": (1e9, 1.0, 1.0)}),
    ("no per-trip bookkeeping (LOOP_TRIP_OPS 0)", {"LOOP_TRIP_OPS": 0}),
    ("hard knee (STREAM_KNEE_P 3, as OVERLAP_P)", {"STREAM_KNEE_P": 3.0}),
    ("session-8 L2 reuse (step at the whole L2, hits 0.4)", {"L2_REUSE": (1.0, 400.0, 1.0, 0.4)}),
]
print("# Ablation of the session-9 streaming terms (CPU replays; H200 times)\n")
for name, patch in VARIANTS:
    saved = {k: getattr(costs, k) for k in patch}
    for k, v in patch.items():
        setattr(costs, k, v)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(SCORE, run_name='__main__')
    for k, v in saved.items():
        setattr(costs, k, v)
    print(f"## {name}\n\n```\n{out.getvalue().rstrip()}\n```\n")
