"""How a tiling trial is timed: verify's GpuTimer, inputs and audited timed calls on the GPU; the CPU
interpreter's wall clock otherwise (not a GPU time).
"""

from __future__ import annotations

import secrets
import time

from egg_mcp.tiling.trial_problem import TimedMismatch, TrialProblem

TIMING_METHOD = "GpuTimer steady state (egg_mcp.evaluation.timing, verify's timer and inputs): {method}, L2 {flush}"


class TrialClock:
    """Times one config's forward the way verify does: the project's GpuTimer (one per job, its flush
    buffer allocated once), fresh inputs per rotation set, median of adaptive repetitions."""

    def __init__(self, problem: TrialProblem, timing_trials: int | None, atol: float = 1e-4, rtol: float = 1e-4):
        self.problem, self.trials, self.timer, self._inputs = problem, timing_trials, None, {}
        self.atol, self.rtol = atol, rtol

    def make_inputs(self, k: int) -> list:
        if k not in self._inputs:
            self._inputs[k] = self.problem.problem.inputs(self.problem.seed + 1 + k)
        return self._inputs[k]

    def time(self, model) -> tuple[float, float | None, str, int | None, list[str], int]:
        torch = self.problem.torch
        if self.problem.device != "cuda":
            return cpu_wall_ms(lambda: model(*self.problem.inputs)) + (None, "cpu interpreter wall clock (not a GPU "
                                                                             "time)",
                                                                         None, [], 3)
        if self.timer is None:
            from egg_mcp.evaluation.timing import GpuTimer

            self.timer = GpuTimer(torch.cuda.current_device())

        from egg_mcp.evaluation.timed_audit import TimedCallAudit
        from egg_mcp.evaluation.timed_checks import check_in_process

        grad = torch.is_grad_enabled()
        torch.set_grad_enabled(False)  # as verify's harness: no per-call context manager inside the timed region
        audit = TimedCallAudit(self.problem.problem.inputs, [secrets.randbits(62) for _ in range(200)])
        try:
            stats, _ = self.timer.measure(lambda xs: model(*xs), self.make_inputs, n_runs=self.trials, audit=audit)
            # timed calls are checked calls: a config whose timed outputs are wrong gets no time
            problem = check_in_process(audit, lambda s: self.problem.reference(*self.problem.problem.inputs(s)),
                                       self.atol, self.rtol)
        finally:
            torch.set_grad_enabled(grad)
        if problem is not None:
            raise TimedMismatch(problem)
        flush = "read-flushed" if stats.l2_flushed else "warm (inputs fit L2)"
        return (stats.median_ms, stats.cv, TIMING_METHOD.format(method=stats.method, flush=flush), stats.sm_clock_mhz,
                list(stats.throttle_reasons or []), stats.n_runs)


def cpu_wall_ms(fn) -> tuple[float]:
    times = []
    with _no_grad():
        fn()
        for _ in range(3):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return (times[len(times) // 2],)


def _no_grad():
    import torch

    return torch.no_grad()
