"""What propose_tiling recommends, and on what evidence.

A measured config is recommended only where it beat the measured current config (the unchanged source, timed
first in the same job) beyond the noise band, and only after verify's own path (`Evaluator.evaluate`: the
sandboxed judge, its correctness trials and its timer) has passed it and timed it faster than the current source
beyond the noise band again. Anything short of that keeps the current config, and the reason says why.
"""

from __future__ import annotations

import math
import time
from typing import Any

from egg_mcp.contract import EvalOptions, EvalResult, median_standard_error
from egg_mcp.tiling.plan import config_key
from egg_mcp.tiling.rewrite import apply_config
from egg_mcp.tiling.tiling_types import ConfigEstimate, MeasuredConfig, Reverification, TilingProposal

BASELINE_NOISE = 0.02
"""A config must beat the current one by more than this share (or 3 standard errors of the two medians, if more)
to be recommended: anything closer is noise, and the current config stays."""


def noise_band(*runs: tuple[float | None, int | None]) -> float:
    """BASELINE_NOISE, or 3 standard errors of the medians (1.2533 cv / sqrt(runs) each) if that is more."""
    se2 = sum(median_standard_error(cv or 0.0, max(1, n or 1)) ** 2 for cv, n in runs)
    return max(BASELINE_NOISE, 3 * math.sqrt(se2))


def choose(proposal: TilingProposal, measured: list[MeasuredConfig], correct: list[MeasuredConfig],
           base: MeasuredConfig | None, feasible: list[ConfigEstimate]) -> MeasuredConfig | None:
    """The measured config to re-verify (None: keep the current one), with the reason so far; measured configs
    only (`measured` holds no config the budget left unmeasured)."""
    if not measured:
        proposal.recommended_reason = "nothing was measured (see note): no config is recommended over the current one"
        return None
    if not correct:
        proposal.recommended_reason = ("no measured config was correct: fix the candidate first (see the errors in "
                                       "`ranked`) before tuning it")
        return None
    if base is None:
        proposal.recommended_reason = ("the current config was not measured, so no measured config can be said to "
                                       "beat it: keep the current config")
        return None
    if not (base.correct and base.median_ms is not None):
        proposal.recommended_reason = (f"the current config did not measure ({base.error_kind or 'no time'}: "
                                       f"{(base.error or '')[:160]}): fix the candidate before tuning it")
        return None
    best = correct[0]
    timed = sum(1 for m in measured if m.median_ms is not None)
    predicted_rank = next((i + 1 for i, e in enumerate(feasible)
                           if config_key(e.config.values) == config_key(best.config.values)), None)
    band = noise_band((best.timing_cv, best.timing_runs), (base.timing_cv, base.timing_runs))
    assert best.median_ms is not None  # correct configs are timed
    if best is not base and best.median_ms < base.median_ms * (1 - band):
        proposal.recommended_reason = (
            f"{base.median_ms / best.median_ms:.2f}x faster than the current config ({best.median_ms:.4f} vs "
            f"{base.median_ms:.4f} ms, beyond the {band:.1%} noise band; fastest of the {timed} configs measured, "
            f"{len(correct)} of them correct; predicted rank {predicted_rank})")
        return best
    others = [m.median_ms for m in correct if m is not base and m.median_ms is not None]
    proposal.recommended_reason = (
        f"keep the current config: no measured config beat it beyond the {band:.1%} noise band (current "
        f"{base.median_ms:.4f} ms, best other {min(others, default=float('nan')):.4f} ms; {timed} configs measured, "
        f"{len(correct)} of them correct)")
    return None


async def reverify(proposal: TilingProposal, evaluator: Any, winner: MeasuredConfig, *, reference_source: str,
                   candidate_source: str, options: EvalOptions) -> float:
    """Verify the winner's source and the current source through verify's path; recommend the winner only when
    it is correct and verify times it faster than the current source beyond the noise band (or cannot time
    either, which the reason says). Returns the seconds it took."""
    started = time.perf_counter()
    source = apply_config(candidate_source, winner.config.values)
    check = Reverification(config=winner.config)
    proposal.reverified = check
    measured_reason = proposal.recommended_reason
    try:
        current = await evaluator.evaluate(reference_source, candidate_source, options)
        new = await evaluator.evaluate(reference_source, source, options)
    except Exception as exc:  # noqa: BLE001 - not re-verified: not recommended
        check.summary = f"re-verification failed to run ({type(exc).__name__}: {exc})"[:300]
        proposal.recommended_reason = (f"keep the current config: the measured winner {winner.config.values} "
                                       f"could not be re-verified ({check.summary}); it measured {measured_reason}")
        return time.perf_counter() - started
    check.verdict, check.current_verdict, check.summary = new.verdict, current.verdict, new.summary[:300]
    check.winner_ms = new.timing.median_ms if new.timing else None
    check.current_ms = current.timing.median_ms if current.timing else None
    proposal.recommended_reason = _reverified_reason(check, winner, new, current, measured_reason)
    if check.confirmed:
        proposal.recommended, proposal.recommended_source = winner.config, source
    return time.perf_counter() - started


def _reverified_reason(check: Reverification, winner: MeasuredConfig, new: EvalResult, current: EvalResult,
                       measured_reason: str) -> str:
    """The reason after verify's re-run; sets check.confirmed where the winner holds up."""
    values = winner.config.values
    if new.verdict != "correct":
        return (f"keep the current config: the measured winner {values} failed re-verification ({new.verdict}: "
                f"{new.summary[:200]}); in the tiling job it measured {measured_reason}")
    if current.verdict != "correct":
        return (f"keep the current config: the current source did not re-verify ({current.verdict}: "
                f"{current.summary[:160]}), so the winner {values} has nothing verified to beat")
    trials = f"correct on {new.correctness_trials_passed} of {new.correctness_trials} trials"
    if new.timing is None or current.timing is None:
        check.confirmed = True
        why = new.timing_unavailable_reason or current.timing_unavailable_reason or "no timing"
        return (f"{measured_reason}; re-verified {trials}, but verify could not time both ({why}): the speed-up "
                "is the tiling job's measurement only")
    band = noise_band((new.timing.cv, new.timing.n_runs), (current.timing.cv, current.timing.n_runs))
    if new.timing.median_ms < current.timing.median_ms * (1 - band):
        check.confirmed = True
        return (f"{measured_reason}; re-verified {trials}, verify times it at {new.timing.median_ms:.4f} vs "
                f"{current.timing.median_ms:.4f} ms for the current source "
                f"({current.timing.median_ms / new.timing.median_ms:.2f}x, beyond the {band:.1%} noise band)")
    return (f"keep the current config: the measured winner {values} re-verified {trials}, but verify times it at "
            f"{new.timing.median_ms:.4f} vs {current.timing.median_ms:.4f} ms for the current source (not faster "
            f"beyond the {band:.1%} noise band); in the tiling job it measured {measured_reason}")
