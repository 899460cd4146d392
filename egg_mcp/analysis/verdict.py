"""One roofline verdict per candidate time, the same words in verify's review flag, profile_ncu and the briefs.

The floor is the one of the fastest compute path the precision ladder admits (`analysis.precision`),
so no verdict calls a time "below the floor" that a faster admissible path allows, and none says "at
the roof" while a faster admissible path leaves room. Pure (no torch): the server calls it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

AT_ROOF_FRACTION = 0.90
"""floor / measured at or above this: at the roof (within ~11 % of the floor), stop working on this."""
BELOW_FLOOR_FRACTION = 1.05
"""floor / measured above this: faster than the floor by more than timing noise: check the counts."""


class RooflineVerdict(BaseModel):
    status: Literal["no_floor", "untimed", "below_floor", "at_roof", "headroom"]
    floor_ms: float | None = None
    compute_path: str | None = Field(default=None,
                                     description="the compute path the floor assumes (fastest admissible)")
    measured_ms: float | None = None
    fraction_of_floor: float | None = Field(default=None, description="floor / measured (1.0 = at the floor)")
    text: str


def _ms(x: float) -> str:
    return f"{x:.3g} ms" if x >= 1 else f"{x * 1e3:.3g} us"


def roofline_verdict(measured_ms: float | None, floor_ms: float | None, compute_path: str | None,
                     *, why_no_floor: str = "no floor", bound: str | None = None,
                     has_dots: bool | None = None) -> RooflineVerdict:
    """The verdict for one time against the floor of the fastest admissible compute path (`bound`:
    'memory' or 'compute', which roof sets that floor, when known; `has_dots` False: the problem has no
    matmul/conv, so its words name no dot path)."""
    if has_dots is False:
        path = "no dots: the fp32 CUDA-core rate" if bound != "memory" else "no dots"
    else:
        path = f"{compute_path} dots" if compute_path else "the fastest admissible path"
    if bound == "memory":
        path = f"DRAM-bound, {path}" if has_dots is False else f"DRAM-bound with {path}"
    if not floor_ms:
        return RooflineVerdict(status="no_floor", measured_ms=measured_ms, compute_path=compute_path,
                               text=f"no roofline verdict: {why_no_floor}")
    if not measured_ms:
        return RooflineVerdict(status="untimed", floor_ms=floor_ms, compute_path=compute_path,
                               text=f"floor {_ms(floor_ms)} ({path}); no measured time")
    frac = floor_ms / measured_ms
    base: dict[str, Any] = dict(floor_ms=floor_ms, compute_path=compute_path, measured_ms=measured_ms,
                                fraction_of_floor=frac)
    if frac > BELOW_FLOOR_FRACTION:
        return RooflineVerdict(status="below_floor", **base, text=(
            f"{_ms(measured_ms)} is below the floor {_ms(floor_ms)} of the fastest admissible compute path "
            f"({compute_path or 'its name unknown'}): check the FLOP/byte counts, that the kernel does all the work, "
            "or that it computes in a "
            "precision the tolerance admits only on these inputs"))
    if frac >= AT_ROOF_FRACTION:
        return RooflineVerdict(status="at_roof", **base, text=(
            f"{100 * frac:.0f}% of the floor {_ms(floor_ms)} ({path}): within {100 * (1 / AT_ROOF_FRACTION - 1):.0f}% "
            "of the fastest admissible path's floor, at the roof: stop here"))
    return RooflineVerdict(status="headroom", **base, text=(
        f"{100 * frac:.0f}% of the floor {_ms(floor_ms)} ({path}): {measured_ms / floor_ms:.2f}x the fastest "
        "admissible path's floor"))
