"""How the judge turns what it saw into a result dict (verdict, summary, fault, the reference's timing beside
the candidate's). A mixin of Judge."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any, Callable, Literal

from egg_mcp.contract import ErrorReport, IntegrityFinding, MismatchReport, TimingStats
from egg_mcp.evaluation.judge_held import REFERENCE_TIMING_MAX_AGE_S
from egg_mcp.evaluation.review import review_findings

if TYPE_CHECKING:
    from egg_mcp.contract import EvalOptions
    from egg_mcp.evaluation.judge_held import HeldReference
    from egg_mcp.problems.problem import Problem

CANDIDATE_FAILURE_VERDICTS = ("compile_error", "runtime_error", "oom")


class Rejected(Exception):
    """Ends the evaluation early with a finished result dict."""

    def __init__(self, result: dict[str, Any]):
        super().__init__(result.get("summary", ""))
        self.result = result


class Verdicts:
    findings: list[IntegrityFinding]
    trials_run: int
    trials_passed: int
    kernels: list[dict]
    torch_ops: list[str]
    opts: EvalOptions
    held: HeldReference | None
    judge_info: dict[str, Any]
    problem: Problem
    ref_model: Any
    timing_seeds: list[int]
    measured_reference_timing: TimingStats | None
    clock: Callable[..., None]
    seed: Callable[[], int]

    def finding(self, check: str, detail: str, severity: Literal["violation", "review"] = "violation") -> None:
        self.findings.append(IntegrityFinding(check=check, severity=severity, detail=detail))

    def _unique(self) -> list[IntegrityFinding]:
        return list({(f.check, f.detail): f for f in self.findings}.values())

    def _violations(self) -> list[IntegrityFinding]:
        return [f for f in self._unique() if f.severity == "violation"]

    def _counts(self) -> dict[str, int]:
        return {"correctness_trials": self.trials_run, "correctness_trials_passed": self.trials_passed}

    def _violation_result(self) -> dict[str, Any]:
        violations = self._violations()
        checks = sorted({f.check for f in violations})
        return {
            "verdict": "integrity_violation",
            "summary": f"Integrity violation ({', '.join(checks)}): {violations[0].detail}. Rewrite so the work "
                       "is done by your Triton kernels on the current stream, then verify again.",
            "integrity": [f.model_dump() for f in self._unique()],
            **self._counts(),
        }

    def _incorrect(self, mismatch: MismatchReport, when: str, forwards: int) -> dict[str, Any]:
        parts = []
        if mismatch.max_abs_error is not None:
            parts.append(f"max abs error {mismatch.max_abs_error:.3g}")
        if mismatch.fraction_mismatched is not None:
            parts.append(f"{mismatch.fraction_mismatched:.2%} of elements off")
        detail = f" ({', '.join(parts)})" if parts else ""
        seen = {(f.check, f.detail) for f in self._violations()}
        try:
            # with the static checks: a kernel on a side stream races the output copy on the GPU, so its outputs
            # come out wrong before the report after the trials could name it; that check wins over `incorrect`
            self._report(forwards=max(1, forwards), check=True)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - the verdict stands without the kernel list
            pass
        new = [f for f in self._violations() if (f.check, f.detail) not in seen]
        result = {
            "verdict": "incorrect",
            "summary": f"Wrong output {when}{detail}: {mismatch.hint}. Fix it (see mismatch) and verify again.",
            "mismatch": mismatch.model_dump(),
            "kernels": self.kernels,
            "torch_ops": self.torch_ops,
            **self._counts(),
        }
        if seen or any(f.check == "side_stream" for f in new):
            result.update(self._violation_result())
        return result

    def _incorrect_or_memory(self, mismatch, when: str, forwards: int) -> dict[str, Any]:
        """Wrong outputs: first one guarded forward. An out-of-bounds write is the root cause (on a GPU a
        row's write one past its end lands in the next row or a neighbouring tensor, so the trials come
        out wrong before any guard ran): `memory_error` wins over `incorrect`, the mismatch is kept."""
        self.clock("memory_guard", message="guarded-memory forward (outputs were wrong)")
        try:
            guard = self._ask(  # type: ignore[attr-defined]
                {"type": "guard", "seed": self.seed()}, "guard")
        except Exception:  # noqa: BLE001 - Rejected: the guarded forward failed too (crash,
            # protocol): the mismatch is the verdict
            guard = {}
        if guard.get("violations") and not self._violations():
            result = self._incorrect(mismatch, when, forwards)
            out = {**result, **self._memory_error(guard["violations"])}
            out["summary"] += f" The outputs were also wrong {when} (see mismatch), most likely from the same write."
            return out
        return self._incorrect(mismatch, when, forwards)

    def _memory_error(self, violations: list) -> dict[str, Any]:
        """Out-of-bounds writes found by the runner's guarded allocations (evidence it could only hide)."""
        first = violations[0] if isinstance(violations[0], dict) else {}
        what = (f"{str(first.get('tensor'))[:60]} (shape {first.get('shape')}, {first.get('dtype')}): "
                f"{str(first.get('detail'))[:200]}")
        detail = "; ".join(
            f"{str(v.get('tensor'))[:60]} {v.get('shape')} {v.get('dtype')}: {str(v.get('detail'))[:200]}"
            for v in violations[:5] if isinstance(v, dict))
        return {
            "verdict": "memory_error",
            "summary": f"Out-of-bounds write: ModelNew.forward wrote outside {what}. The outputs may still compare "
                       "equal, but the kernel corrupts neighbouring memory; fix the store masks (e.g. `<` vs `<=`, "
                       "the last partial tile) and verify again.",
            "error": ErrorReport(kind="memory_error", message=detail[:2000]).model_dump(),
            "integrity": [f.model_dump() for f in self._unique()],
            **self._counts(),
        }

    def _candidate_failed(self, message: dict[str, Any], counted: bool = False) -> dict[str, Any]:
        """A failure the runner reported: its verdict is accepted only among the failure verdicts."""
        verdict = message.get("verdict")
        if verdict not in CANDIDATE_FAILURE_VERDICTS:
            verdict = "runtime_error"
        try:
            error = ErrorReport.model_validate(message.get("error") or {"kind": "error", "message": ""})
        except Exception:  # noqa: BLE001
            error = ErrorReport(kind="error", message="(the runner's error report was malformed)")
        error.message, error.traceback = error.message[:2000], error.traceback[-6000:]
        fault = "reference" if message.get("fault") == "reference" else "candidate"
        trials = self.trials_run + (1 if counted else 0)
        return {"verdict": verdict, "summary": str(message.get("summary") or error.message)[:1000],
                "error": error.model_dump(), "fault": fault, "correctness_trials": trials,
                "correctness_trials_passed": self.trials_passed}

    def _runner_died(self, report: ErrorReport, counted: bool = False) -> dict[str, Any]:
        verdict = "oom" if report.kind == "oom" else "runtime_error"
        advice = ("Use less memory (smaller tiles, no huge temporaries)." if verdict == "oom" else
                  "Stay within the runner's bounds (write no large files, start no processes) and verify again."
                  if report.kind == "resource_limit" else
                  "Fix the crash (out-of-bounds pointer, exit call, bad ctypes use) and verify again.")
        return {"verdict": verdict, "summary": f"{report.message}. {advice}", "error": report.model_dump(),
                "correctness_trials": self.trials_run + (1 if counted else 0),
                "correctness_trials_passed": self.trials_passed}

    def _protocol(self, detail: str) -> dict[str, Any]:
        """The runner broke the protocol: only candidate code in it can have done that."""
        self.finding("runner_protocol", f"the runner sent malformed or unexpected data: {detail[:300]}")
        return {**self._violation_result(),
                "summary": "Integrity violation (runner_protocol): the candidate's process sent the judge data the "
                           f"harness never writes ({detail[:200]}); remove whatever writes to file descriptors or "
                           "touches the harness's modules, then verify again."}

    def _harness_fault(self, detail: str, traceback: str = "") -> dict[str, Any]:
        return {"verdict": "runtime_error", "fault": "harness",
                "summary": f"Not your kernel: egg-mcp's evaluation harness failed ({detail[:300]}). Fix: run "
                           "`python -m egg_mcp doctor` and check the install (torch, triton, numpy), then verify "
                           "again; report it if it persists.",
                "error": ErrorReport(kind="harness", message=detail[:2000], traceback=traceback[-6000:]).model_dump(),
                **self._counts()}

    def _correct_summary(self, out, n, timing, reference_timing) -> str:
        reviews = [f for f in self.findings if f.severity == "review"]
        if timing is None:
            text = f"Correct on {n}/{n} trials (+ re-check) in the Triton interpreter; no timing without a GPU."
        else:
            retaken = (f"; taken again after {timing.remeasured} disturbed reading(s) at CV "
                       f"{', '.join(f'{100 * c:.1f}%' for c in timing.disturbed_cvs or [])}"
                       if timing.remeasured else "")
            text = (f"Correct on {n}/{n} trials; {timing.median_ms:.4f} ms median (CV {100 * (timing.cv or 0):.2f}%, "
                    f"{timing.method}{retaken}).")
            if timing.graph_fallback:
                text += (f" Timed per call by events: the CUDA graph capture failed ({timing.graph_fallback[:160]}), "
                         "so host launch gaps between its kernels count.")
            if reference_timing is not None and out.get("speedup"):
                text += f" {out['speedup']:.2f}x vs the reference in eager PyTorch."
            if timing.isolated is not None:
                text += f" {timing.isolated.median_ms:.4f} ms per call from a clean L2 (what ncu reports)"
                excess = timing.median_ms / timing.isolated.median_ms - 1 if timing.isolated.median_ms > 0 else 0
                if excess > 0.05 and timing.median_ms >= 0.02:
                    text += (f"; back to back each call costs {100 * excess:.0f}% more, most likely writing back the "
                             "previous call's output from L2")
                text += "."
            if timing.throttled:
                text += f" GPU throttled during timing ({', '.join(timing.throttle_reasons)}): re-verify."
        if reviews:
            text += " Flagged for review: " + "; ".join(f.detail for f in reviews[:2]) + "."
        else:
            text += " Next: profile it or commit it."
        return text

    def _reference_timing(self, result: dict[str, Any]) -> None:
        """The reference timed here, after the runner and its descendants are dead (GPU only)."""
        if "timing" not in result:
            result["integrity"] = [f.model_dump() for f in self._unique()]
            result["summary"] = self._correct_summary(result, result["correctness_trials"], None, None)
            return
        stats = TimingStats.model_validate(result["timing"])
        reference_timing = None
        baseline_ms = self.opts.baseline_ms
        held = self.held.held_timing(self.opts.timing_trials) if self.held is not None else None
        if baseline_ms is None and held is not None:  # measured by this judge minutes ago, on this GPU
            reference_timing, age = held
            self.judge_info["reference_timing"] = f"held ({age:.0f} s old, max {REFERENCE_TIMING_MAX_AGE_S:.0f} s)"
        elif baseline_ms is None:
            from egg_mcp.evaluation.timing import GpuTimer

            cache: dict[int, list] = {}

            def make_inputs(k: int) -> list:
                if k not in cache:
                    cache[k] = self.problem.inputs(self.timing_seeds[k] if k < len(self.timing_seeds)
                                                   else secrets.randbits(62))
                return cache[k]

            import torch

            timer = GpuTimer(torch.cuda.current_device())
            reference_timing, _ = timer.measure(lambda xs: self.ref_model(*xs), make_inputs,
                                                n_runs=self.opts.timing_trials)
            cache.clear()  # at 6 GiB per input set, a dozen sets held on reached the next job (gpu_cache.release_all)
            del timer
            self.judge_info["reference_timing"] = "measured"
            self.measured_reference_timing = reference_timing
        if reference_timing is not None:
            baseline_ms = reference_timing.median_ms
            result["reference_timing"] = reference_timing.model_dump()
            result["speedup"] = baseline_ms / stats.median_ms if stats.median_ms > 0 else None
        self.findings.extend(review_findings(stats.median_ms, reference_ms=baseline_ms,
                                             floor_ms=self.opts.roofline_floor_ms,
                                             floor_path=self.opts.roofline_floor_path,
                                             floor_basis=self.opts.roofline_floor_basis))
        result["integrity"] = [f.model_dump() for f in self._unique()]
        result["summary"] = self._correct_summary(result, result["correctness_trials"], stats, reference_timing)

def timing_cross_check(stats: TimingStats, wall_ms: float) -> list[IntegrityFinding]:
    """The runner's timing against the judge's wall clock around the whole timing command.

    Sound bound: the timed runs happened inside that wall time, so mean x runs (and the runner's
    own host clock) cannot exceed it. Plausibility: the timer aims at ~300 ms of measured time and
    its overhead (flushes, warm-up, estimate) is a few times that, so measured time below 2 % of the
    wall is flagged for review (a runner scaling its numbers down)."""
    out = []
    measured = (stats.mean_ms or stats.median_ms) * max(1, stats.n_runs)
    if measured > 1.05 * wall_ms + 1.0 or (stats.host_wall_ms or 0) > 1.05 * wall_ms + 1.0:
        out.append(IntegrityFinding(check="timing_forged", severity="violation", detail=(
            f"the runner reported {measured:.1f} ms of timed runs ({stats.n_runs} x {stats.mean_ms} ms) but the "
            f"judge's clock saw only {wall_ms:.1f} ms for the whole timing phase")))
    elif wall_ms > 2000 and measured < 0.02 * wall_ms:
        out.append(IntegrityFinding(check="timing_forged", severity="review", detail=(
            f"the timed runs account for {measured:.1f} ms of the {wall_ms:.0f} ms the timing phase took on the "
            "judge's clock (under 2 %): the reported times may be understated")))
    return out
