"""Which configs to measure next: the model's ranking first, then a walk around the measured best.

Pure functions, shared by the measuring worker (which runs the rounds without leaving the GPU
job) and the benchmark (which replays the same choices against an exhaustive measurement).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

Config = dict[str, int]


def config_key(config: Config) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(config.items()))


def round_sizes(max_trials: int) -> list[int]:
    """60% of the trials on the model's ranking, the rest in small rounds around the best found."""
    if max_trials <= 3:
        return [max_trials] if max_trials > 0 else []
    first = math.ceil(0.6 * max_trials)
    step = max(1, math.ceil(0.2 * max_trials))
    sizes, left = [first], max_trials - first
    while left > 0:
        sizes.append(min(step, left))
        left -= sizes[-1]
    return sizes


def _distance(a: Config, b: Config, choices: Mapping[str, Sequence[int]]) -> int:
    total = 0
    for name, value in a.items():
        options = list(choices.get(name, []))
        other = b.get(name, value)
        if value in options and other in options:
            total += abs(options.index(value) - options.index(other))
        elif value != other:
            total += 2
    return total


def next_configs(ranked: list[tuple[Config, float]], choices: Mapping[str, Sequence[int]],
                 measured: Mapping[tuple, float | None], n: int) -> list[Config]:
    """Up to `n` unmeasured configs from `ranked` ((config, predicted_ms), best first).

    `measured` maps config_key -> median ms (None when the config failed). Before any success the
    ranking is followed, taking one config per distinct predicted time first (equal predictions
    mean the model cannot tell them apart, so one of them is enough to start with). After a
    success, the unmeasured neighbours of the best measured config come first (one step in one
    parameter's choice list, then two), ordered by predicted time, those the model cannot tell
    from an already measured config last.
    """
    pool = [(c, p) for c, p in ranked if config_key(c) not in measured]
    if not pool or n <= 0:
        return []
    predicted_of = {config_key(c): p for c, p in ranked}
    seen_predictions = {_rounded(predicted_of[k]) for k in measured if k in predicted_of}
    successes = [(ms, k) for k, ms in measured.items() if ms is not None]
    picks: list[Config] = []
    if successes:
        best = dict(min(successes)[1])
        by_distance: dict[int, list[tuple[Config, float]]] = {}
        for config, predicted in pool:
            by_distance.setdefault(_distance(config, best, choices), []).append((config, predicted))
        for distance in sorted(by_distance):
            if distance > 2:
                break
            group = by_distance[distance]
            fresh = [c for c, p in group if _rounded(p) not in seen_predictions]
            stale = [c for c, p in group if _rounded(p) in seen_predictions]
            for config in fresh + stale:
                if len(picks) < n:
                    picks.append(config)
        picked = {config_key(c) for c in picks}
        pool = [(c, p) for c, p in pool if config_key(c) not in picked]
    taken_predictions = set(seen_predictions)
    deferred = []
    for config, predicted in pool:
        if len(picks) >= n:
            break
        if _rounded(predicted) in taken_predictions:
            deferred.append(config)
            continue
        taken_predictions.add(_rounded(predicted))
        picks.append(config)
    for config in deferred:
        if len(picks) >= n:
            break
        picks.append(config)
    return picks


TIE_BAND = 0.01
"""Predictions closer than this (1 %) are below what the cost model can resolve."""


def tie_note(predicted_ms: list[float | None], top: int = 5) -> str | None:
    """A warning when the model's best predictions tie: it cannot pick between them, only a measurement can."""
    values = sorted(p for p in predicted_ms if p is not None and p > 0)[:top]
    if len(values) < 2:
        return None
    spread = values[-1] / values[0] - 1
    if spread > TIE_BAND:
        return None
    return (f"the model's top {len(values)} predictions lie within {spread:.2%} of each other ({values[0]:.4g}-"
            f"{values[-1]:.4g} ms): it cannot tell them apart; the order among them is arbitrary until measured on "
            "a GPU")


def _rounded(predicted_ms: float) -> float:
    return float(f"{predicted_ms:.5g}")


def simulate_search(ranked: list[tuple[Config, float]], choices: Mapping[str, Sequence[int]],
                    oracle: Mapping[tuple, float | None], max_trials: int) -> list[Config]:
    """The configs the search would measure, in order, given every config's measured time."""
    measured: dict[tuple, float | None] = {}
    order: list[Config] = []
    for size in round_sizes(max_trials):
        batch = next_configs(ranked, choices, measured, size)
        if not batch:
            break
        for config in batch:
            measured[config_key(config)] = oracle.get(config_key(config))
            order.append(config)
    return order
