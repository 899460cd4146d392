"""Two candidates timed interleaved on one GPU, and the statistics that turn the rounds into a verdict.

Two single timings taken minutes apart differ by clock drift, thermal state and neighbours as much
as by a 2 % kernel change. Timing A and B in alternating rounds on the same device (A B, B A, A B,
…; the order flips each round so a linear drift cancels) and comparing them round by round asks
the question directly: the paired ratio B/A of each round sees the same machine state.

`run_interleaved` is a worker job (`Evaluator.run_job("egg_mcp.evaluation.interleaved:run_interleaved")`):
it loads the reference and both candidates, checks both outputs against the reference once on the
same input, and times each round with `timing.GpuTimer`. `paired_verdict` is pure Python (the
server imports it; torch is imported only inside the job).
"""

from __future__ import annotations

import importlib
import math
import random
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

MIN_EFFECT = 0.005
"""Smallest median change called a difference (0.5 %): below the A/A spread verify reads on the H200
(A/A ratio 0.996-1.001 at 1.9 us-2.2 ms, README 'Measured on the H200')."""
CONFIDENCE = 0.95
BOOTSTRAP = 4000
RUNS_PER_ROUND = 10

Verdict = Literal["faster", "slower", "inconclusive"]


def _median(values: list[float]) -> float:
    return statistics.median(values)


def sign_test_p(ratios: list[float]) -> float:
    """Two-sided exact sign test of 'median ratio = 1' (ties dropped)."""
    below = sum(r < 1 for r in ratios)
    above = sum(r > 1 for r in ratios)
    n = below + above
    if n == 0:
        return 1.0
    k = min(below, above)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def paired_verdict(ratios: list[float], *, min_effect: float = MIN_EFFECT, confidence: float = CONFIDENCE,
                   resamples: int = BOOTSTRAP, seed: int = 0) -> dict[str, Any]:
    """Verdict on B vs A from per-round ratios t_B / t_A.

    A percentile bootstrap of the median ratio (resampling rounds) gives a `confidence` interval and
    the share of resamples in which B is faster (median < 1). 'faster' when the whole interval lies
    below 1 and the median is at least `min_effect` below it; 'slower' mirrored; otherwise
    'inconclusive'. `confidence` in the result is the bootstrap share on the verdict's side (for
    'inconclusive', on the side the median leans to). A sign test p-value is given beside it."""
    ratios = [float(r) for r in ratios if r is not None and math.isfinite(r) and r > 0]
    if len(ratios) < 5:
        raise ValueError(f"{len(ratios)} usable rounds; at least 5 are needed for a verdict")
    rng = random.Random(seed)
    n = len(ratios)
    medians = sorted(_median([ratios[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples))
    lo = medians[int((1 - confidence) / 2 * resamples)]
    hi = medians[min(resamples - 1, int((1 + confidence) / 2 * resamples))]
    med = _median(ratios)
    p_faster = sum(m < 1 for m in medians) / resamples
    p_slower = sum(m > 1 for m in medians) / resamples
    if hi < 1 and med <= 1 - min_effect:
        verdict: Verdict = "faster"
        conf = p_faster
    elif lo > 1 and med >= 1 + min_effect:
        verdict = "slower"
        conf = p_slower
    else:
        verdict = "inconclusive"
        conf = p_faster if med < 1 else p_slower
    return {"verdict": verdict, "confidence": round(conf, 4), "median_ratio": med, "ci_low": lo, "ci_high": hi,
            "sign_test_p": sign_test_p(ratios), "rounds": n, "min_effect": min_effect,
            "confidence_level": confidence}


_IMPORTED_BEFORE_CANDIDATES = ("egg_mcp.evaluation.compare", "egg_mcp.evaluation.timed_audit",
                               "egg_mcp.evaluation.timed_checks", "egg_mcp.evaluation.timing",
                               "egg_mcp.problems.modules", "egg_mcp.problems.problem")
"""What run_interleaved imports before it loads the candidates (its helpers then import them from there)."""


def run_interleaved(payload: dict[str, Any]) -> dict[str, Any]:
    """Worker job. Payload: reference_source, source_a, source_b, dtype, size_overrides, rounds, seed,
    atol, rtol. Returns {times_a_ms, times_b_ms, ratios, orders, method, check, phase_s, device}."""
    import torch

    # timing captures its torch/time entry points at import: before any candidate code is imported
    for module in _IMPORTED_BEFORE_CANDIDATES:
        importlib.import_module(module)

    if not torch.cuda.is_available():
        raise RuntimeError("interleaved timing needs a CUDA device; this worker has none")
    t0 = time.perf_counter()
    seed = int(payload.get("seed", 0))
    problem, models, ref_model = _load(payload, seed)
    phase = {"load": time.perf_counter() - t0}

    check, details = _check_once(problem, models, ref_model, seed, payload)
    torch.cuda.synchronize()
    if any(v != "ok" for v in check.values()):
        return _rejected(check, details, phase)

    t1 = time.perf_counter()
    times, orders, methods = _timed_rounds(problem, models, ref_model, seed, payload, check, details)
    phase["timing"] = time.perf_counter() - t1
    if any(v != "ok" for v in check.values()):
        return _rejected(check, details, phase)
    ratios = [b / a for a, b in zip(times["a"], times["b"]) if a > 0]
    return {"check": check, "times_a_ms": times["a"], "times_b_ms": times["b"], "ratios": ratios, "orders": orders,
            "method": ", ".join(sorted(methods)) + f" ({RUNS_PER_ROUND} runs per candidate per round)",
            "device": torch.cuda.get_device_name(), "phase_s": phase}


def _rejected(check: dict[str, str], details: dict[str, str], phase: dict[str, float]) -> dict[str, Any]:
    return {"check": check, "check_detail": details, "times_a_ms": [], "times_b_ms": [], "ratios": [], "orders": [],
            "phase_s": phase}


def _load(payload: dict[str, Any], seed: int):
    """The reference and the two candidates, loaded with the size overrides; (problem, models, ref_model)."""
    import torch

    from egg_mcp.problems.modules import import_source
    from egg_mcp.problems.problem import DTYPES, Problem, apply_size_overrides

    work = Path(tempfile.mkdtemp(prefix="egg-interleaved-"))
    tag = f"{int(time.time() * 1e6) % 10**9}"
    reference = import_source(payload["reference_source"], work / f"egg_cmp_ref_{tag}.py", f"egg_cmp_ref_{tag}")
    mods = {}
    for key in ("a", "b"):
        mods[key] = import_source(payload[f"source_{key}"], work / f"egg_cmp_{key}_{tag}.py", f"egg_cmp_{key}_{tag}")
    overrides = dict(payload.get("size_overrides") or {})
    apply_size_overrides(reference, None, overrides)
    for mod in mods.values():
        apply_size_overrides(reference, mod, overrides)
    problem = Problem(reference, torch.device("cuda"), DTYPES[payload.get("dtype", "float32")])
    init = problem.init_inputs(seed)
    models = {k: problem.build(m.ModelNew, init, seed) for k, m in mods.items()}
    ref_model = problem.build(reference.Model, init, seed)
    return problem, models, ref_model


def _check_once(problem, models: dict, ref_model, seed: int, payload: dict[str, Any]):
    """One correctness check on a shared input: a stale or wrong kernel must not win a timing duel."""
    import torch

    from egg_mcp.evaluation.compare import compare_outputs

    check: dict[str, str] = {}
    details: dict[str, str] = {}  # where a mismatching candidate went wrong
    with torch.no_grad():
        x = problem.inputs(seed + 1)
        want = ref_model(*x)
        for k, model in models.items():
            # the same structural walk and rules as verify (every part of the output, complex, exact integers)
            mismatch = compare_outputs(model(*x), want, payload.get("atol", 1e-4), payload.get("rtol", 1e-4))
            check[k] = "ok" if mismatch is None else "mismatch"
            if mismatch is not None:
                details[k] = f"{mismatch.path}: {mismatch.hint}"[:300]
    return check, details


def _timed_rounds(problem, models: dict, ref_model, seed: int, payload: dict[str, Any], check: dict[str, str],
                  details: dict[str, str]):
    """Rounds of A and B timed in alternating order on shared input sets; then each candidate's audited timed
    outputs are checked against the reference (a mismatch lands in `check`). Returns (times, orders, methods)."""
    import torch

    from egg_mcp.evaluation.timed_audit import TimedCallAudit
    from egg_mcp.evaluation.timed_checks import check_in_process
    from egg_mcp.evaluation.timing import GpuTimer

    timer = GpuTimer(torch.cuda.current_device())
    sets: dict[int, list] = {}

    def make_inputs(j: int) -> list:
        """Input set j, made once and shared by A and B (the timer rotates sets to keep the L2 cold)."""
        if j not in sets:
            sets[j] = problem.inputs(seed + 2 + j)
        return sets[j]

    def runner(model):
        def fn(inputs):
            return model(*inputs)
        return fn

    fns = {k: runner(m) for k, m in models.items()}
    # timed calls are checked calls: audited outputs of each candidate's timed calls against the reference
    audits = {k: TimedCallAudit(problem.inputs, [secrets.randbits(62) for _ in range(200)]) for k in models}
    times: dict[str, list[float]] = {"a": [], "b": []}
    orders: list[str] = []
    methods: set[str] = set()
    with torch.no_grad():
        for i in range(int(payload.get("rounds", 30))):
            order = ("a", "b") if i % 2 == 0 else ("b", "a")
            orders.append("".join(order).upper())
            for k in order:
                stats, _extra = timer.measure(fns[k], make_inputs, n_runs=RUNS_PER_ROUND, audit=audits[k])
                times[k].append(stats.median_ms)
                methods.add(stats.method)
        for k, audit in audits.items():
            problem_found = check_in_process(audit, lambda s: ref_model(*problem.inputs(s)),
                                             payload.get("atol", 1e-4), payload.get("rtol", 1e-4))
            if problem_found is not None:
                check[k], details[k] = "mismatch_while_timed", problem_found[:300]
    return times, orders, methods
