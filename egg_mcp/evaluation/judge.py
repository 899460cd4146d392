"""The trusted judge (runs in the worker process; never imports candidate code).

It owns the seeds, the reference module, the reference model and its outputs, and the result pipe
to the server. The candidate runs in a separate runner process (runner.py) that receives seeds only
after it imported the candidate, regenerates the inputs from them, and sends its outputs back as
raw bytes. The judge computes the reference on the same inputs (while the runner works), compares,
and decides. Whatever the runner says (findings, kernels, timing) is evidence: it can only ever
make a verdict worse, except the timing numbers, which are cross-checked against the judge's own
clock (see `timing_cross_check`).

Order of one correctness trial: fresh seed -> runner (candidate call with NaN-poisoned allocations,
aliasing, subclass and input-mutation checks) -> outputs as bytes -> compared with the judge's
reference on inputs from the same seed (wrong outputs: one guarded-memory forward first, and an
out-of-bounds write it finds wins over `incorrect`). Then: integrity report, guarded-memory forward, timing
(GPU), re-check on fresh inputs and on an input set whose contents changed in place, runner killed
with every descendant, reference timing (GPU, in the judge, with no candidate process alive).
"""

from __future__ import annotations

import os
import secrets
import time
from typing import Any

import torch

from egg_mcp.config import output_exchange_from_bytes, triton_interpret
from egg_mcp.contract import ErrorReport, EvalOptions, IntegrityFinding, KernelInfo, TimingStats
from egg_mcp.evaluation import bounds, timed_audit, timed_checks, wire
from egg_mcp.evaluation.compare import compare_outputs, worst_error_share
from egg_mcp.evaluation.compile_clock import runner_reports
from egg_mcp.evaluation.errors import classify
from egg_mcp.evaluation.exchange import OutputExchange, aligned, offer_region
from egg_mcp.evaluation.failures import _failure, env_info
from egg_mcp.evaluation.gpu_cache import phase_peaks_gib, release_cached, use_judge_allocator
from egg_mcp.evaluation.judge_held import HeldReference
from egg_mcp.evaluation.judge_reference import ReferenceFailed, load_reference
from egg_mcp.evaluation.judge_verdicts import Rejected, Verdicts, timing_cross_check
from egg_mcp.evaluation.runner_process import (
    RunnerGone,
    RunnerProcess,
    take,
    teach_launchers,
)
from egg_mcp.problems.problem import DTYPES
from egg_mcp.sandbox.floor import below_floor

RECHECK_CALLS = 3  # extra candidate calls on one input set before the re-check when there is no GPU timing
TIMING_SEEDS = 64
AUDIT_SEEDS = 200  # fresh contents for audited timed calls (refills; a graph reading refills every rotating set)
_perf_counter = time.perf_counter


def _phase(name: str, **extra) -> None:
    from egg_mcp.evaluation.channel import phase

    phase(name, **extra)


class Judge(Verdicts):
    on_runner_confined = None  # judge_host.py: called with the runner's sandbox report once it confined itself
    exchange: OutputExchange | None = None  # large outputs' shared region, offered before the first trial
    exchange_offered = False

    def __init__(self, payload: dict[str, Any], held: HeldReference | None = None):
        self.opts = EvalOptions.model_validate(payload["options"])
        self.payload = payload
        self.held = held
        self.judge_info: dict[str, Any] = {"reference": "held" if held is not None else "loaded"}
        self.interpreter = triton_interpret()
        self.device = "cpu" if self.interpreter else "cuda"
        self.dtype = DTYPES[self.opts.dtype]
        self.seeds = list(payload["seeds"])
        self.init_seed = held.init_seed if held is not None else int(payload["init_seed"])
        self.findings: list[IntegrityFinding] = []
        self.trials_passed = 0
        self.trials_run = 0
        self.phase_s: dict[str, float] = {}
        self._phase_open: tuple[str, float] | None = None
        self.runner: RunnerProcess | None = None
        self.sandbox: dict[str, Any] | None = None
        self.kernels: list[dict] = []
        self.torch_ops: list[str] = []
        self.notes: dict[str, str] = {}  # how outputs were compared, by path (compare.compare_outputs)
        self.error_share: dict[str, Any] | None = None  # worst |got-e| / tolerance over the trials (_note_shares)
        self.checked_signatures: set[tuple] = set()
        self.output_leaf_bytes: list[int] = []

    def clock(self, name: str | None, report: str | None = None, **extra) -> None:
        """Close the running phase and open `name` (None: just close); `report` also tells the engine."""
        if report is not None:
            _phase(report, **extra)
        now = _perf_counter()
        if self._phase_open is not None:
            prev, start = self._phase_open
            self.phase_s[prev] = round(self.phase_s.get(prev, 0.0) + now - start, 4)
            if self.device == "cuda" and torch.cuda.is_initialized():  # what each phase held (large sizes: OOM)
                for key, gib in phase_peaks_gib().items():  # reserved (what the card lost) and allocated (live)
                    peaks = self.judge_info.setdefault(key, {})
                    peaks[prev] = max(peaks.get(prev, 0.0), gib)
        self._phase_open = (name, now) if name else None

    def seed(self) -> int:
        return self.seeds.pop() if self.seeds else secrets.randbits(62)

    # -- main ----------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        result: dict[str, Any] = {"env": env_info(self.interpreter).model_dump(), "fault": "candidate"}
        try:
            result.update(self._run())
        except Rejected as rejected:
            result.update(rejected.result)
        finally:
            if self.runner is not None:
                self.clock("runner_teardown")
                if self.runner.bounds is not None:  # what the job used, beside its bounds (judge_info.bounds)
                    self.judge_info["runner_peak"] = self.runner.peak_text()
                self.runner.kill()
        if result.get("verdict") == "correct":
            self.clock("timing_reference")
            self._reference_timing(result)
        if self.notes:
            result["notes"] = list(self.notes.values())[:8]
            if result.get("verdict") in ("correct", "incorrect"):
                result["summary"] = f"{result.get('summary', '')} Note: {' '.join(result['notes'][:2])}"
        self.clock(None)
        result["phase_s"] = dict(self.phase_s)
        result["sandbox"] = self.sandbox
        result["judge"] = self.judge_info
        result.setdefault("correctness_trials", self.trials_run)
        result.setdefault("correctness_trials_passed", self.trials_passed)
        return result

    def _run(self) -> dict[str, Any]:
        mode = "interp" if self.interpreter else "gpu"
        self.clock("runner_start", "load", message="starting the sandboxed runner")
        self.runner = take(mode)
        if self.held is not None:  # a persistent judge's reference: loaded by an earlier job
            self.problem, self.ref_model = self.held.problem, self.held.ref_model
        else:
            self.clock("load_reference", message="loading the reference")
            self._load_reference()
            self.clock("runner_start")
        self._ask_ready()
        self.clock("import_candidate", message="importing the candidate")
        self.bounds = bounds.for_job(bounds.footprint_of(self.problem.module, self.ref_model, self.device, self.dtype),
                                     self.payload)
        self.judge_info["bounds"] = self.bounds.describe()
        self.runner.watch(self.bounds)  # memory, tasks and scratch of the runner tree, from here to the kill
        self._ask({"type": "confine", "bounds": self.bounds.to_wire()}, "confined")
        refused = below_floor(self.sandbox)
        if refused is not None:  # a runner weaker than the server's floor never gets the candidate
            raise Rejected(self._harness_fault(refused))
        if self.on_runner_confined is not None:  # a persistent judge may start the next runner now
            self.on_runner_confined(self.sandbox)
        self._ask({"type": "load", "candidate_source": self.payload["candidate_source"],
                   "reference_source": self.payload["reference_source"],
                   "options": self.opts.model_dump(mode="json"), "init_seed": self.init_seed}, "loaded")
        # the first call compiles the candidate's kernels (Triton JITs on first launch): its own phase
        self.clock("compile_first_trial", "run", message="correctness trials", done=0,
                   total=self.opts.correctness_trials)
        n = self.opts.correctness_trials
        for trial in range(n):
            mismatch = self._trial({"seed": self.seed()}, trial, "correctness")
            if trial == 0:
                self.clock("correctness_trials")
            _phase("trial", done=trial + 1, total=n, message=f"correctness trial {trial + 1}/{n}")
            if mismatch is not None:
                return self._incorrect_or_memory(mismatch, f"on correctness trial {trial + 1}/{n}", n)
        self._report(forwards=n, check=True)
        base = {"kernels": self.kernels, "torch_ops": self.torch_ops,
                "correctness_trials": n, "correctness_trials_passed": self.trials_passed}
        if self._violations():
            return {**base, **self._violation_result()}
        self.clock("memory_guard", message="guarded-memory forward")
        guard = self._ask({"type": "guard", "seed": self.seed()}, "guard")
        if guard.get("violations"):
            return {**base, **self._memory_error(guard["violations"])}

        timing, reason, timed = None, None, False
        if self.device == "cuda" and self.opts.timing:
            self.clock("timing_candidate", "timing", message="timing the candidate")
            timing = self._time()
            timed = True
        elif self.device == "cpu":
            reason = ("no GPU: correctness was checked in the Triton interpreter on the CPU, where timings are "
                      "meaningless, so none is reported")
        else:
            reason = "timing was not requested (options.timing = false)"

        self.clock("recheck", "recheck", message="re-checking correctness after repeated calls")
        recheck = self._recheck(timed)
        if recheck is not None:
            return {**base, **recheck}
        self._report(forwards=1, check=True)
        if self._violations():
            return {**base, **self._violation_result()}
        out = {**base, "verdict": "correct", "timing_unavailable_reason": reason}
        if self.error_share is not None:
            out["error_share"] = {k: round(v, 6) if isinstance(v, float) else v for k, v in self.error_share.items()}
        if timing is not None:
            out["timing"] = timing.model_dump()
        return out

    # -- the runner conversation -------------------------------------------------------------------
    def _ask_ready(self) -> None:
        """A runner that dies before `ready` ran no candidate code (a started spare killed by the host's OOM killer
        under load, say): it is replaced once (another started runner, else a fresh one), and the judge says so; a
        second death is a fault."""
        assert self.runner is not None  # _run took one
        for attempt in (1, 2):
            try:
                self.runner.wait_ready()
                break
            except RunnerGone as gone:
                if attempt == 2:
                    raise Rejected(self._harness_fault(f"the sandboxed runner did not start ({gone.report.message})"))
                self.runner.kill()
                self.judge_info["runner_replaced"] = (
                    f"a started runner died before it was ready: {gone.report.message}"[:300])
                self.runner = take(self.runner.mode)  # another started spare if one is alive, else a fresh runner
            except wire.WireError as exc:
                raise Rejected(self._protocol(str(exc)))
        self.judge_info.update({f"runner_{k}": v for k, v in getattr(self.runner, "warmup", {}).items()})

    def _ask(self, header: dict[str, Any], expect: str, max_blob_bytes: int = 0, fds: list[int] | None = None) -> Any:
        """One command and its reply (with its blobs when `max_blob_bytes`); the reply's findings are collected;
        failures end the evaluation."""
        assert self.runner is not None  # _run took one
        try:
            message, blobs = self.runner.request(header, max_blob_bytes, fds)
        except RunnerGone as gone:
            raise Rejected(self._runner_died(gone.report)) from None
        except wire.WireError as exc:
            raise Rejected(self._protocol(str(exc))) from None
        kind = self._reply(message, expect)
        if kind == "confined":
            self.sandbox = message.get("sandbox") if isinstance(message.get("sandbox"), dict) else None
        return (message, blobs) if max_blob_bytes else message

    def _reply(self, message: dict[str, Any], expect: str, counted: bool = False) -> str:
        """Every answer's first reading: its findings; the candidate's failure, or an error in the runner's harness
        code, ends the evaluation as such (never as a protocol breach); any other type than `expect` is one."""
        self._collect(message.get("findings", []))
        kind = message.get("type")
        if kind == "failed":
            raise Rejected(self._candidate_failed(message, counted=counted))
        if kind == "runner_error":
            raise Rejected(self._harness_fault(f"the runner's harness code raised {message.get('kind')}: "
                                               f"{str(message.get('message'))[:300]}", str(message.get("traceback"))))
        if kind != expect:
            raise Rejected(self._protocol(f"expected a '{expect}' message, got {str(kind)[:40]!r}"))
        return expect

    def _collect(self, findings: Any) -> None:
        if not isinstance(findings, list) or len(findings) > 500:
            raise Rejected(self._protocol("findings are not a list of at most 500 entries"))
        for item in findings:
            try:
                finding = IntegrityFinding.model_validate(item)
            except Exception:  # noqa: BLE001
                raise Rejected(self._protocol("a finding is not a valid IntegrityFinding")) from None
            finding.detail = finding.detail[:1000]
            self.findings.append(finding)

    def _report(self, forwards: int, check: bool) -> None:
        message = self._ask({"type": "report", "forwards": forwards, "check": check}, "report")
        kernels, ops = message.get("kernels"), message.get("torch_ops")
        if not isinstance(kernels, list) or not isinstance(ops, list):
            raise Rejected(self._protocol("the integrity report has no kernel list or torch-op list"))
        try:
            self.kernels = [KernelInfo.model_validate(k).model_dump() for k in kernels[:64]]
        except Exception:  # noqa: BLE001
            raise Rejected(self._protocol("the integrity report's kernel list is malformed")) from None
        self.torch_ops = [str(op)[:100] for op in ops[:200]]

    # -- reference side ----------------------------------------------------------------------------
    def _load_reference(self):
        try:
            self.reference_dir, reference, self.problem, self.ref_model = load_reference(
                self.payload["reference_source"], self.opts.size_overrides, self.device, self.dtype, self.init_seed)
        except ReferenceFailed as failed:
            raise Rejected(failed.result) from None
        return reference

    def _expected_raw(self, seed: int) -> Any:
        try:
            return self.ref_model(*self.problem.inputs(seed))
        except BaseException as exc:  # noqa: BLE001
            raise Rejected({**_failure(classify(exc), exc, None, "The reference model failed"),
                            "fault": "reference"}) from None

    def _expected(self, seed: int) -> tuple[Any, list]:
        """The reference's output and its leaves (wire.flatten_output: the structure the candidate must match)."""
        out = self._expected_raw(seed)
        try:
            expected = [leaf for _, leaf in wire.flatten_output(out, strict=True)[1]]
        except ValueError as exc:
            raise Rejected({"verdict": "runtime_error", "fault": "reference", "summary": f"The reference's output "
                            f"cannot be compared: {str(exc)[:300]}.", "error": ErrorReport(
                                kind="bad_reference_output", message=str(exc)[:2000]).model_dump()}) from None
        if not self.output_leaf_bytes:
            self.output_leaf_bytes = [v.numel() * v.element_size() if isinstance(v, torch.Tensor) else 64
                                      for v in timed_checks.leaves(out)]
        return out, expected

    def _offer_exchange(self, leaves: list) -> None:
        """Large outputs come back through one shared region sized to the reference's (exchange.offer_region)."""
        self.exchange_offered = True
        total = sum(aligned(e.numel() * e.element_size()) for e in leaves if isinstance(e, torch.Tensor))
        if total < output_exchange_from_bytes():  # below it (64 MiB) the socket is as fast
            return
        held = self.held.exchange if self.held is not None else None
        self.exchange, self.judge_info["output_exchange"] = offer_region(
            lambda header, fd: self._ask(header, "exchange_ready", fds=[fd]), total, self.device == "cuda", held)

    def _trial(self, cmd: dict[str, Any], trial: int, stage: str, expected_seed: int | None = None):
        """The runner's outputs for `cmd` against the reference on inputs from the same seed."""
        seed = expected_seed if expected_seed is not None else cmd["seed"]
        first = None
        if not self.exchange_offered:  # the reference's outputs size the shared region before the first trial
            first = self._expected(seed)
            self._offer_exchange(first[1])
        assert self.runner is not None  # _run took one
        self.runner.send({"type": "trial", "trial": trial, "stage": stage, **cmd})
        expected, leaves = first if first is not None else self._expected(seed)  # meanwhile
        limit = 2 * sum(e.numel() * e.element_size() for e in leaves if isinstance(e, torch.Tensor)) + (1 << 20)
        try:
            message, blobs = self.runner.recv(limit)
        except RunnerGone as gone:
            raise Rejected(self._runner_died(gone.report, counted=True)) from None
        except wire.WireError as exc:
            raise Rejected(self._protocol(str(exc))) from None
        if trial == 0 and stage == "correctness":
            self.judge_info.update(runner_reports(message))  # the runner's words: shown, never used
            if self.runner.mode == "gpu":
                teach_launchers(message.get("kernel_signatures"))  # for the spares: validated, build hints only
        self._reply(message, "outputs", counted=True)
        self._note_launches(message.get("launches"))
        try:
            got = wire.decode_output(message.get("structure"), message.get("values"), blobs, self.exchange,
                                     self.device)
        except wire.WireError as exc:
            raise Rejected(self._protocol(str(exc))) from None
        self.trials_run += 1
        if self._violations():
            raise Rejected(self._violation_result())
        shares: dict[str, tuple[float, float]] = {}
        mismatch = compare_outputs(got, expected, self.opts.tolerance.atol, self.opts.tolerance.rtol,
                                   notes=self.notes, to_expected_device=True, shares=shares)
        del got, expected, leaves
        release_cached()  # the runner's next step needs what this trial's comparison peaked at (gpu_cache.py)
        self._note_shares(shares)
        if mismatch is not None:
            mismatch.trial = trial + 1
            if message.get("reused") is True:
                self.finding("output_cache", "the output is the same buffer as an earlier call's and its contents "
                             "are stale for the new inputs: outputs are cached between calls")
            return mismatch
        self.trials_passed += 1
        return None

    def _note_shares(self, shares: dict[str, tuple[float, float]]) -> None:
        """The worst error as a share of the tolerance over the trials so far (reported with a correct verdict)."""
        self.error_share = worst_error_share(self.error_share, shares)

    def _note_launches(self, launches: Any) -> None:
        """A checked call's Triton launches (name, grid): what every timed call must launch too."""
        if launches is None:
            return
        sig = timed_checks.signature(launches)
        if sig is None:
            raise Rejected(self._protocol("a trial's launch list is malformed"))
        if len(self.checked_signatures) < timed_checks.MAX_SIGNATURES:
            self.checked_signatures.add(sig)

    # -- timing and re-check -----------------------------------------------------------------------
    def _time(self) -> TimingStats:
        self.timing_seeds = [self.seed() for _ in range(TIMING_SEEDS)]
        audit_seeds = [self.seed() for _ in range(AUDIT_SEEDS)]
        started = _perf_counter()
        message, blobs = self._ask({"type": "time", "seeds": self.timing_seeds, "n_runs": self.opts.timing_trials,
                                    "isolated": self.opts.isolated_timing, "audit_seeds": audit_seeds}, "timing",
                                   max_blob_bytes=self._audit_blob_limit())
        wall_ms = (_perf_counter() - started) * 1e3
        try:
            stats = TimingStats.model_validate(message.get("stats"))
        except Exception:  # noqa: BLE001
            raise Rejected(self._protocol("the timing message carries no valid TimingStats")) from None
        if not (stats.median_ms > 0 and stats.n_runs > 0):
            raise Rejected(self._protocol(f"implausible timing: median {stats.median_ms} ms over {stats.n_runs} runs"))
        self.findings.extend(timing_cross_check(stats, wall_ms))
        self._check_timed_calls(message, blobs, stats, set(audit_seeds) | set(self.timing_seeds))
        isolated_s = message.get("isolated_s")
        if isinstance(isolated_s, (int, float)) and 0 <= isolated_s <= wall_ms / 1e3:
            self.clock("timing_isolated")  # the runner's share of this phase, moved to its own entry
            self.phase_s["timing_isolated"] = round(float(isolated_s), 4)
            self.phase_s["timing_candidate"] = round(self.phase_s["timing_candidate"] - float(isolated_s), 4)
            self._phase_open = ("timing_candidate", _perf_counter())
        return stats

    def _audit_blob_limit(self) -> int:
        per_call = sum(timed_audit.kept_bytes(n) for n in self.output_leaf_bytes) + 4096
        return timed_audit.MAX_KEPT * 2 * per_call + (1 << 20)

    def _check_timed_calls(self, message: dict[str, Any], blobs: list, stats: TimingStats, seeds: set[int]) -> None:
        """What was timed against what was checked: launches, audited outputs, the physical limit."""
        tol = self.opts.tolerance
        findings, audited, error = timed_checks.timed_call_findings(
            message, blobs, stats, seeds, self.checked_signatures, self._expected_raw,
            timed_checks.trial_rules(tol.atol, tol.rtol), sum(self.output_leaf_bytes))
        release_cached()  # the audited seeds' reference outputs
        if error is not None:
            raise Rejected(self._protocol(error))
        self.findings.extend(findings)
        self.judge_info["timed_calls_audited"] = audited

    def _recheck(self, timed: bool) -> dict[str, Any] | None:
        """A kernel that goes wrong after N calls, or returns outputs cached by input pointer, fails here."""
        if not timed:
            self._ask({"type": "calls", "seed": self.seed(), "n": RECHECK_CALLS}, "done")
        mismatch = self._trial({"seed": self.seed()}, self.trials_run, "re-check")
        if mismatch is not None:
            return self._incorrect_or_memory(mismatch, "when re-checked on fresh inputs after repeated calls (the "
                                                       "kernel "
                                   "goes wrong after several calls: state kept between calls?)", 1)
        refill = self.seed()
        mismatch = self._trial({"seed": refill, "use_kept": True, "refill_seed": refill}, self.trials_run,
                               "re-check")
        if mismatch is not None:
            self.finding("output_cache", "the output for an input tensor whose contents changed in place was stale: "
                         "outputs are cached between calls (by pointer or object)")
            result = self._violation_result()
            result["mismatch"] = mismatch.model_dump()
            return result
        return None


def evaluate(payload: dict[str, Any]) -> dict[str, Any]:
    """Worker target behind WorkerEvaluator.evaluate (harness.evaluate_job): a one-shot judge."""
    torch.set_grad_enabled(False)
    use_judge_allocator()  # before the judge's first CUDA allocation
    judge = Judge(payload)
    result = judge.run()
    if judge.exchange is not None:
        judge.exchange.close()
    result["judge"] = {**result.get("judge", {}), "pid": os.getpid(), "job": 1, "persistent": False}
    return result

