"""The evaluation job itself (runs inside a worker process, never in the server).

Order of one correctness trial, chosen so the candidate cannot read or reuse the answer:
  1. fresh inputs from a seed the parent drew with `secrets` (created directly on the device);
  2. pristine clones of the inputs kept by the harness;
  3. the CANDIDATE runs first, with every fresh allocation poisoned with NaN
     (torch deterministic mode's fill_uninitialized_memory) and its aten ops and Triton launches
     recorded; no reference result exists anywhere in memory at that point;
  4. its outputs are checked (tensor subclass, aliasing inputs) and copied into harness buffers;
  5. inputs are compared with the clones (mutation);
  6. only then the reference runs, on the pristine clones; outputs are compared; the reference
     result is overwritten with NaN before it is freed.
After the trials: integrity findings, timing (GPU), a re-check on fresh inputs and on a timing
input set whose contents changed in place (outputs cached by pointer fail there).
"""

from __future__ import annotations

import os
import platform
import secrets
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch._dynamo  # noqa: F401  (imported lazily by use_deterministic_algorithms; it rebinds torch functions)
import torch.utils.deterministic  # noqa: F401  (its flag poisons fresh allocations)

from egg_mcp.evaluation import worker
from egg_mcp.evaluation.modules import import_source
from egg_mcp.evaluation.problem import DTYPES, Problem, apply_size_overrides
from egg_mcp.evaluation.api import (
    BaselineResult,
    EnvInfo,
    ErrorReport,
    EvalOptions,
    IntegrityFinding,
    KernelInfo,
    MismatchReport,
)
from egg_mcp.evaluation.compare import compare_tensor, structure_mismatch
from egg_mcp.evaluation.integrity import AttributeSnapshot, LaunchCounter, OpRecorder, new_live_threads

# Trusted references, taken before any candidate code is imported.
_clone = torch.Tensor.clone
_equal = torch.equal
_use_deterministic = torch.use_deterministic_algorithms
_deterministic_enabled = torch.are_deterministic_algorithms_enabled
_det_module = sys.modules["torch.utils.deterministic"]
_enumerate_threads = threading.enumerate
_perf_counter = time.perf_counter

RECHECK_CALLS = 3
"""Extra candidate calls on one input set before the post-timing re-check when there is no GPU timing."""
SPEEDUP_REVIEW_FACTOR = 10.0


class Rejected(Exception):
    """Ends the evaluation early with a finished result dict."""

    def __init__(self, result: dict[str, Any]):
        super().__init__(result.get("summary", ""))
        self.result = result


def _phase(name: str, **extra) -> None:
    ch = worker.channel()
    if ch is not None:
        ch.phase(name, **extra)


# ------------------------------------------------------------------------------- environment

def env_info(interpreter: bool) -> EnvInfo:
    import triton

    info = EnvInfo(
        device="cpu (Triton interpreter)" if interpreter else torch.cuda.get_device_name(),
        interpreter=interpreter,
        cuda=torch.version.cuda,
        torch=torch.__version__,
        triton=triton.__version__,
        python=platform.python_version(),
    )
    if not interpreter:
        try:
            import pynvml

            pynvml.nvmlInit()
            driver = pynvml.nvmlSystemGetDriverVersion()
            info.driver = driver.decode() if isinstance(driver, bytes) else driver
        except Exception:
            pass
    return info


# ------------------------------------------------------------------------------- errors

def _exception_chain(exc: BaseException) -> list[BaseException]:
    chain, seen = [], set()
    while exc is not None and id(exc) not in seen:
        chain.append(exc)
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return chain


def error_report(exc: BaseException, candidate_path: str | None) -> ErrorReport:
    """The exception with its traceback trimmed to candidate frames; candidate_line = submitted line."""
    line = None
    frames_text: list[str] = []
    # Innermost exception first: its deepest candidate frame is the line to fix.
    for item in reversed(_exception_chain(exc)):
        item_line = None
        for frame in traceback.extract_tb(item.__traceback__):
            if candidate_path and frame.filename == candidate_path:
                item_line = frame.lineno
                frames_text.append(f'  candidate line {frame.lineno}, in {frame.name}\n    {frame.line or ""}')
        if isinstance(item, SyntaxError) and candidate_path and item.filename == candidate_path:
            item_line = item.lineno
            frames_text.append(f"  candidate line {item.lineno}\n    {(item.text or '').rstrip()}")
        compile_line = _triton_compile_line(item)
        if compile_line is not None:
            item_line = compile_line
        if line is None:
            line = item_line
    if not frames_text:
        frames_text = [ln.rstrip() for ln in traceback.format_tb(exc.__traceback__)[-3:]]
    message = f"{type(exc).__name__}: {exc}"
    text = "\n".join(frames_text[-8:]) + "\n" + message[:3000]
    return ErrorReport(kind=type(exc).__name__, message=str(exc)[:2000] or type(exc).__name__,
                       candidate_line=line, traceback=text[-6000:])


def _triton_compile_line(exc: BaseException) -> int | None:
    """Line in the submitted file of a Triton CompilationError (its node line is relative to the def)."""
    node = getattr(exc, "node", None)
    if node is None or not hasattr(node, "lineno"):
        return None
    tb = exc.__traceback__
    fn = None
    while tb is not None:
        candidate = tb.tb_frame.f_locals.get("fn") or tb.tb_frame.f_locals.get("self")
        if hasattr(candidate, "starting_line_number"):
            fn = candidate
        tb = tb.tb_next
    if fn is None:
        return None
    base = getattr(fn, "def_file_line_number", None) or fn.starting_line_number
    return int(base) + int(node.lineno) - 1


def classify(exc: BaseException) -> str:
    """Verdict for an exception raised by candidate code."""
    names = {type(e).__name__ for e in _exception_chain(exc)}
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or "OutOfMemoryError" in names:
        return "oom"
    if names & {"CompilationError", "CompileTimeAssertionFailure", "OutOfResources", "UnsupportedLanguageConstruct"}:
        return "compile_error"
    if "InterpreterError" in names and names & {"AttributeError", "NameError", "TypeError", "SyntaxError"}:
        return "compile_error"
    return "runtime_error"


def _failure(verdict: str, exc: BaseException, candidate_path: str | None, when: str, **extra) -> dict[str, Any]:
    report = error_report(exc, candidate_path)
    at = f" at line {report.candidate_line}" if report.candidate_line else ""
    if isinstance(exc, SystemExit):
        report.kind = "exit"
        report.message = f"candidate code called sys.exit({exc.code!r})"
    advice = {
        "compile_error": "fix that line and verify again",
        "oom": "use less memory (smaller tiles or temporaries) and verify again",
        "runtime_error": "fix the error and verify again",
    }[verdict]
    cuda_note = ""
    if "CUDA error" in report.message or "device-side assert" in report.message:
        cuda_note = " (a CUDA fault: usually an out-of-bounds pointer or a failed tl.device_assert; add masks)"
    summary = f"{when}{at}: {report.kind}: {report.message.splitlines()[0][:300] if report.message else ''}{cuda_note}; {advice}."
    return {"verdict": verdict, "summary": summary, "error": report.model_dump(), **extra}


# ------------------------------------------------------------------------------- loading

def load_module(source: str, path: Path, name: str):
    return import_source(source, path, name)


def _as_list(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    a0, a1 = _storage_span(a)
    b0, b1 = _storage_span(b)
    return a0 < b1 and b0 < a1 and a1 > a0 and b1 > b0


_cuda_synchronize = torch.cuda.synchronize


def _sync(device: str) -> None:
    if device == "cuda":
        _cuda_synchronize()


# ------------------------------------------------------------------------------- the evaluation

class Evaluation:
    def __init__(self, payload: dict[str, Any]):
        self.opts = EvalOptions.model_validate(payload["options"])
        self.payload = payload
        self.interpreter = os.environ.get("TRITON_INTERPRET") == "1"
        self.device = "cpu" if self.interpreter else "cuda"
        self.dtype = DTYPES[self.opts.dtype]
        self.seeds = list(payload["seeds"])
        self.init_seed = int(payload["init_seed"])
        self.findings: list[IntegrityFinding] = []
        self.candidate_path: str | None = None
        self.ref_calls = {"init": 0, "forward": 0}
        self.candidate_active = False
        self.trials_passed = 0
        self.trials_run = 0
        self.previous_outputs: list[torch.Tensor] = []
        self.phase_s: dict[str, float] = {}
        self._phase_open: tuple[str, float] | None = None

    def clock(self, name: str | None, report: str | None = None, **extra) -> None:
        """Close the running phase and open `name` (None: just close); the breakdown of verify's wall
        time. `report` also tells the engine (phase deadlines, client progress) with `extra`."""
        if report is not None:
            _phase(report, **extra)
        now = _perf_counter()
        if self._phase_open is not None:
            prev, start = self._phase_open
            self.phase_s[prev] = round(self.phase_s.get(prev, 0.0) + now - start, 4)
        self._phase_open = (name, now) if name else None

    def seed(self) -> int:
        return self.seeds.pop() if self.seeds else secrets.randbits(62)

    def finding(self, check: str, detail: str, severity: str = "violation") -> None:
        self.findings.append(IntegrityFinding(check=check, severity=severity, detail=detail))

    # -- instruments ---------------------------------------------------------------------------
    def install(self) -> None:
        torch.set_grad_enabled(False)
        self.recorder = OpRecorder()
        self.recorder.__enter__()
        self.counter = LaunchCounter(self.recorder)
        self.counter.install()
        self.timer = None
        if self.device == "cuda" and self.opts.timing:
            from egg_mcp.evaluation.timing import GpuTimer

            self.timer = GpuTimer(torch.cuda.current_device())
        self.snapshot = AttributeSnapshot()

    def _wrap_reference(self, cls) -> None:
        evaluation = self
        original_init, original_forward = cls.__init__, cls.forward

        def __init__(model_self, *args, **kwargs):
            if evaluation.candidate_active:
                evaluation.ref_calls["init"] += 1
            original_init(model_self, *args, **kwargs)

        def forward(model_self, *args, **kwargs):
            if evaluation.candidate_active:
                evaluation.ref_calls["forward"] += 1
            return original_forward(model_self, *args, **kwargs)

        cls.__init__, cls.forward = __init__, forward

    @contextmanager
    def candidate_call(self, record_ops: bool = True, poison: bool = True):
        """Candidate code runs only inside this: ops recorded, launches counted, allocations poisoned."""
        threads_before = {t.ident for t in _enumerate_threads()}
        self.candidate_active = True
        self.recorder.recording = record_ops
        self.counter.counting = True
        if self.device == "cuda":
            self.counter.expected_stream = torch.cuda.current_stream().cuda_stream
        if poison:
            _use_deterministic(True, warn_only=True)
            _det_module.fill_uninitialized_memory = True
        try:
            yield
            _sync(self.device)
        finally:
            self.candidate_active = False
            self.recorder.recording = False
            self.counter.counting = False
            still_poisoning = _deterministic_enabled() and _det_module.fill_uninitialized_memory
            if poison:
                _use_deterministic(False)
            if poison and not still_poisoning:
                self.finding("monkeypatch", "candidate code switched off the harness's deterministic "
                             "allocation poisoning during forward")
            if not self.recorder.still_installed():
                self.finding("monkeypatch", "candidate code removed the harness's torch dispatch mode")
                self.recorder.__enter__()
            escaped = new_live_threads(threads_before)
            if escaped:
                self.finding("side_stream", f"thread(s) {escaped} started by the candidate were still running "
                             "after forward returned: work escaping the synchronisation/timer")

    # -- main ----------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        result: dict[str, Any] = {"env": env_info(self.interpreter).model_dump()}
        try:
            result.update(self._run())
        except Rejected as rejected:
            result.update(rejected.result)
        self.clock(None)
        result["phase_s"] = dict(self.phase_s)
        result.setdefault("correctness_trials", self.trials_run)
        result.setdefault("correctness_trials_passed", self.trials_passed)
        return result

    def _load(self):
        workdir = Path(os.getcwd()) / f"src-{secrets.token_hex(4)}"
        workdir.mkdir()
        self.clock("load_reference", "load", message="loading the reference")
        try:
            reference = load_module(self.payload["reference_source"], workdir / "reference.py",
                                    f"egg_reference_{secrets.token_hex(4)}")
            for name in ("Model", "get_inputs", "get_init_inputs"):
                if not hasattr(reference, name):
                    raise AttributeError(f"the reference defines no {name}")
        except BaseException as exc:  # noqa: BLE001
            raise Rejected(_failure("runtime_error", exc, None, "The reference failed to load")) from None
        return workdir, reference

    def _run(self) -> dict[str, Any]:
        self.install()
        workdir, reference = self._load()
        self._wrap_reference(reference.Model)
        self.clock("import_candidate", "load", message="importing the candidate")
        self.candidate_path = str(workdir / "candidate.py")
        try:
            candidate = load_module(self.payload["candidate_source"], Path(self.candidate_path),
                                    f"egg_candidate_{secrets.token_hex(4)}")
        except BaseException as exc:  # noqa: BLE001
            verdict = "oom" if classify(exc) == "oom" else "compile_error"
            raise Rejected(_failure(verdict, exc, self.candidate_path, "Importing the candidate failed")) from None
        if not isinstance(getattr(candidate, "ModelNew", None), type):
            raise Rejected({"verdict": "compile_error",
                            "summary": "The candidate defines no class ModelNew; define ModelNew(nn.Module) with "
                            "the same constructor and forward signature as Model.",
                            "error": ErrorReport(kind="missing_ModelNew", message="no ModelNew").model_dump()})
        try:
            apply_size_overrides(reference, candidate, self.opts.size_overrides)
        except ValueError as exc:
            raise Rejected({"verdict": "runtime_error", "summary": str(exc),
                            "error": ErrorReport(kind="bad_options", message=str(exc)).model_dump()}) from None

        self.clock("build_models")
        problem = Problem(reference, self.device, self.dtype)
        self.problem = problem
        try:
            init_inputs = problem.init_inputs(self.init_seed)
            ref_model = problem.build(reference.Model, init_inputs, self.init_seed)
        except BaseException as exc:  # noqa: BLE001
            raise Rejected(_failure(classify(exc), exc, None, "Building the reference model failed")) from None
        try:
            with self.candidate_call(poison=False):
                cand_model = problem.build(candidate.ModelNew, init_inputs, self.init_seed)
        except BaseException as exc:  # noqa: BLE001
            raise Rejected(_failure(classify(exc), exc, self.candidate_path,
                                    "Constructing ModelNew failed")) from None
        self.ref_model, self.cand_model = ref_model, cand_model

        self.clock("correctness_trials", "run", message="correctness trials", done=0,
                   total=self.opts.correctness_trials)
        self.recorder.ops.clear()
        self.counter.reset()
        n = self.opts.correctness_trials
        for trial in range(n):
            mismatch = self._trial(problem.inputs(self.seed()), trial, "correctness")
            _phase("trial", done=trial + 1, total=n, message=f"correctness trial {trial + 1}/{n}")
            if mismatch is not None:
                return self._incorrect(mismatch, f"on correctness trial {trial + 1}/{n}")
        launches_per_forward = self.counter.total() / max(1, n)
        kernels = self._kernels(n)
        torch_ops = self.recorder.compute_ops()
        self._check_static_integrity(torch_ops, launches_per_forward)
        base = {"kernels": [k.model_dump() for k in kernels], "torch_ops": sorted(torch_ops),
                "correctness_trials": n, "correctness_trials_passed": self.trials_passed}
        if self._violations():
            return {**base, **self._violation_result()}

        timing, reference_timing, reason, timing_set = None, None, None, None
        if self.device == "cuda" and self.opts.timing:
            self.clock("timing_candidate", "timing", message="timing the candidate")
            try:
                timing, reference_timing, timing_set = self._time()
            except BaseException as exc:  # noqa: BLE001
                raise Rejected({**base, **_failure(classify(exc), exc, self.candidate_path,
                                                   "The candidate failed while being timed")}) from None
        elif self.device == "cpu":
            reason = ("no GPU: correctness was checked in the Triton interpreter on the CPU, where timings are "
                      "meaningless, so none is reported")
        else:
            reason = "timing was not requested (options.timing = false)"

        self.clock("recheck", "recheck", message="re-checking correctness after repeated calls")
        recheck = self._recheck(timing_set)
        if recheck is not None:
            return {**base, **recheck}
        if self._violations():
            return {**base, **self._violation_result()}

        out = {**base, "verdict": "correct", "timing_unavailable_reason": reason,
               "integrity": [f.model_dump() for f in self.findings]}
        if timing is not None:
            out["timing"] = timing.model_dump()
        if reference_timing is not None:
            out["reference_timing"] = reference_timing.model_dump()
            out["speedup"] = reference_timing.median_ms / timing.median_ms if timing and timing.median_ms > 0 else None
        out["summary"] = self._correct_summary(out, n, timing, reference_timing)
        return out

    # -- trials ----------------------------------------------------------------------------------
    def _trial(self, inputs: list, trial: int, stage: str) -> MismatchReport | None:
        pristine = [_clone(x) if isinstance(x, torch.Tensor) else x for x in inputs]
        try:
            with self.candidate_call():
                out = self.cand_model(*inputs)
        except BaseException as exc:  # noqa: BLE001
            raise Rejected(_failure(classify(exc), exc, self.candidate_path,
                                    f"ModelNew.forward failed ({stage} trial {trial + 1})",
                                    correctness_trials=self.trials_run + 1,
                                    correctness_trials_passed=self.trials_passed)) from None
        self.trials_run += 1
        outs = _as_list(out)
        # Earlier outputs are kept alive, so a fresh allocation can never reuse their address: an output
        # at the same address as an earlier one is a buffer the candidate kept between calls.
        reused = any(isinstance(o, torch.Tensor) and o.numel() and any(
            _overlaps(o, p) for p in self.previous_outputs) for o in outs)
        self.previous_outputs.extend(o for o in outs if isinstance(o, torch.Tensor))
        for i, o in enumerate(outs):
            if isinstance(o, torch.Tensor) and type(o) not in (torch.Tensor, torch.nn.Parameter):
                self.finding("tensor_subclass", f"output {i} is a {type(o).__module__}.{type(o).__name__}, not a "
                             "plain torch.Tensor (subclasses can fake comparisons)")
            if isinstance(o, torch.Tensor):
                for j, x in enumerate(inputs):
                    if isinstance(x, torch.Tensor) and _overlaps(o, x):
                        self.finding("output_alias", f"output {i} shares memory with input {j}: write a new "
                                     "output tensor instead of returning (a view of) an input")
        if self._violations():
            raise Rejected(self._violation_result())
        got = [torch.Tensor.detach(o).clone() if isinstance(o, torch.Tensor) else o for o in outs]
        got = [_plain(g) for g in got]
        for j, (x, p) in enumerate(zip(inputs, pristine)):
            if isinstance(x, torch.Tensor) and not (x.shape == p.shape and _equal(_plain(x), p)):
                self.finding("input_mutation", f"input {j} was modified by ModelNew.forward; the reference "
                             "semantics leave inputs untouched: write to a new tensor")
        if self._violations():
            raise Rejected(self._violation_result())
        del out, outs
        try:
            expected = _as_list(self.ref_model(*pristine))
        except BaseException as exc:  # noqa: BLE001
            raise Rejected(_failure(classify(exc), exc, None, "The reference model failed")) from None
        mismatch = structure_mismatch(got, expected)
        if mismatch is None:
            for i, (g, e) in enumerate(zip(got, expected)):
                if isinstance(e, torch.Tensor):
                    mismatch = compare_tensor(g, e, self.opts.tolerance.atol, self.opts.tolerance.rtol, i)
                    if mismatch is not None:
                        break
        for e in expected:  # no reference result survives in memory for the next candidate call
            if isinstance(e, torch.Tensor) and e.is_floating_point():
                e.fill_(float("nan"))
        del expected
        if mismatch is not None:
            mismatch.trial = trial + 1
            if reused:
                self.finding("output_cache", "the output is the same buffer as an earlier call's and its contents "
                             "are stale for the new inputs: outputs are cached between calls")
            return mismatch
        self.trials_passed += 1
        return None

    def _incorrect(self, mismatch: MismatchReport, when: str) -> dict[str, Any]:
        parts = []
        if mismatch.max_abs_error is not None:
            parts.append(f"max abs error {mismatch.max_abs_error:.3g}")
        if mismatch.fraction_mismatched is not None:
            parts.append(f"{mismatch.fraction_mismatched:.2%} of elements off")
        detail = f" ({', '.join(parts)})" if parts else ""
        result = {
            "verdict": "incorrect",
            "summary": f"Wrong output {when}{detail}: {mismatch.hint}. Fix it (see mismatch) and verify again.",
            "mismatch": mismatch.model_dump(),
            "correctness_trials": self.trials_run,
            "correctness_trials_passed": self.trials_passed,
            "kernels": [k.model_dump() for k in self._kernels(max(1, self.trials_run))],
            "torch_ops": sorted(self.recorder.compute_ops()),
        }
        if self._violations():
            result.update(self._violation_result())
        return result

    def _kernels(self, forwards: int) -> list[KernelInfo]:
        out = []
        for name, count in self.counter.launches.items():
            info = dict(self.counter.info.get(name, {"name": name}))
            info["launches_per_forward"] = count / max(1, forwards)
            out.append(KernelInfo.model_validate(info))
        return out

    # -- integrity -------------------------------------------------------------------------------
    def _check_static_integrity(self, torch_ops: dict[str, int], launches_per_forward: float) -> None:
        if torch_ops:
            listed = ", ".join(f"{k} x{v}" for k, v in list(torch_ops.items())[:12])
            self.finding("torch_compute", f"ModelNew.forward ran torch compute ops ({listed}); all compute must "
                         "happen in Triton kernels (torch may only allocate, view and copy)")
        if launches_per_forward == 0:
            self.finding("no_triton_kernel", "ModelNew.forward launched no Triton kernel")
        if self.ref_calls["init"] or self.ref_calls["forward"]:
            self.finding("reference_model", f"candidate code constructed ({self.ref_calls['init']}x) or called "
                         f"({self.ref_calls['forward']}x) the reference Model")
        if self.counter.foreign_stream_launches:
            self.finding("side_stream", f"Triton kernel(s) {sorted(set(self.counter.foreign_stream_launches))} were "
                         "launched on a stream other than the current one (escapes the timer)")
        self._check_patches()

    def _check_patches(self) -> None:
        changed = self.snapshot.changed()
        if not self.counter.wrappers_installed() or not self.counter.hook_installed():
            changed.append("triton launch instrumentation")
        if changed:
            self.finding("monkeypatch", f"candidate code replaced {', '.join(changed[:10])}")

    def _violations(self) -> list[IntegrityFinding]:
        seen, out = set(), []
        for f in self.findings:
            if f.severity == "violation" and (f.check, f.detail) not in seen:
                seen.add((f.check, f.detail))
                out.append(f)
        return out

    def _violation_result(self) -> dict[str, Any]:
        violations = self._violations()
        checks = sorted({f.check for f in violations})
        unique = list({(f.check, f.detail): f for f in self.findings}.values())
        return {
            "verdict": "integrity_violation",
            "summary": f"Integrity violation ({', '.join(checks)}): {violations[0].detail}. Rewrite so the work "
                       "is done by your Triton kernels on the current stream, then verify again.",
            "integrity": [f.model_dump() for f in unique],
            "correctness_trials": self.trials_run,
            "correctness_trials_passed": self.trials_passed,
        }

    # -- timing and re-check -----------------------------------------------------------------------
    def _time(self):
        problem, timer = self.problem, self.timer
        cand, ref = self.cand_model, self.ref_model
        cache: dict[int, list] = {}

        def make_inputs(k: int) -> list:
            if k not in cache:
                cache[k] = problem.inputs(self.seed())
            return cache[k]

        self.counter.reset()
        self.counter.counting = True
        self.counter.expected_stream = None  # the timer itself launches on a capture stream for graphs
        self.recorder.__exit__(None, None, None)  # no per-op Python overhead inside the timed region
        try:
            stats, _ = timer.measure(lambda xs: cand(*xs), make_inputs, n_runs=self.opts.timing_trials)
        finally:
            self.counter.counting = False
        if self.counter.total() == 0:
            self.finding("no_triton_kernel", "no Triton kernel was launched while the candidate was timed (it "
                         "behaves differently when observed)")
        host_ms = timer.host_synced_ms(lambda xs: cand(*xs), make_inputs(0))
        per_call = stats.median_ms
        if host_ms > 3 * per_call + 1.0:
            self.finding("side_stream", f"a synchronised call takes {host_ms:.3f} ms on the host clock but the "
                         f"timer saw {per_call:.3f} ms: work escapes the timed stream (side stream or thread)")
        elif host_ms > 1.5 * per_call + 0.2:
            self.finding("side_stream", f"host clock {host_ms:.3f} ms vs timed {per_call:.3f} ms per call "
                         "(launch overhead, or work escaping the timer)", severity="review")
        if stats.method == "cuda_events" and stats.host_wall_ms is not None:
            event_total = stats.mean_ms * stats.n_runs
            if stats.host_wall_ms < 0.9 * event_total - 1.0:
                self.finding("monkeypatch", f"CUDA events report {event_total:.2f} ms in total but only "
                             f"{stats.host_wall_ms:.2f} ms passed on the host clock")
        if self.opts.isolated_timing:
            self.clock("timing_isolated")
            try:
                stats.isolated = timer.measure_isolated(lambda xs: cand(*xs), make_inputs)
            except Exception as exc:  # noqa: BLE001 - an extra reading; its absence must not fail verify
                stats.isolated_error = f"{type(exc).__name__}: {exc}"[:300]
        reference_timing = None
        baseline_ms = getattr(self.opts, "baseline_ms", None)
        if baseline_ms is None:
            self.clock("timing_reference")
            reference_timing, _ = timer.measure(lambda xs: ref(*xs), make_inputs, n_runs=self.opts.timing_trials)
            baseline_ms = reference_timing.median_ms
        if baseline_ms and stats.median_ms > 0 and baseline_ms / stats.median_ms > SPEEDUP_REVIEW_FACTOR:
            self.finding("implausible_speedup", f"{baseline_ms / stats.median_ms:.1f}x faster than the reference "
                         f"({baseline_ms:.4f} ms vs {stats.median_ms:.4f} ms): check the result by hand",
                         severity="review")
        floor = self.opts.roofline_floor_ms
        if floor and stats.median_ms < floor:
            self.finding("beyond_floor", f"{stats.median_ms:.4f} ms is below the physical floor {floor:.4f} ms "
                         "(roofline from FLOPs and bytes) of this GPU", severity="review")
        self.recorder.__enter__()
        return stats, reference_timing, make_inputs(0)

    def _recheck(self, timing_set: list | None) -> dict[str, Any] | None:
        """A kernel that goes wrong after N calls, or returns outputs cached by input pointer, fails here."""
        problem = self.problem
        if timing_set is None:
            timing_set = problem.inputs(self.seed())
            for _ in range(RECHECK_CALLS):
                with self.candidate_call(record_ops=False, poison=False):
                    self.cand_model(*timing_set)
        mismatch = self._trial(problem.inputs(self.seed()), self.trials_run, "re-check")
        if mismatch is not None:
            return self._incorrect(mismatch, "when re-checked on fresh inputs after repeated calls (the kernel "
                                   "goes wrong after several calls: state kept between calls?)")
        fresh = problem.inputs(self.seed())
        for old, new in zip(timing_set, fresh):
            if isinstance(old, torch.Tensor) and old.shape == new.shape:
                old.copy_(new)
        mismatch = self._trial(timing_set, self.trials_run, "re-check")
        if mismatch is not None:
            self.finding("output_cache", "the output for an input tensor whose contents changed in place was stale: "
                         "outputs are cached between calls (by pointer or object)")
            result = self._violation_result()
            result["mismatch"] = mismatch.model_dump()
            return result
        self._check_static_integrity(self.recorder.compute_ops(), 1)
        return None

    def _correct_summary(self, out, n, timing, reference_timing) -> str:
        reviews = [f for f in self.findings if f.severity == "review"]
        if timing is None:
            text = f"Correct on {n}/{n} trials (+ re-check) in the Triton interpreter; no timing without a GPU."
        else:
            text = (f"Correct on {n}/{n} trials; {timing.median_ms:.4f} ms median (CV {100 * (timing.cv or 0):.2f}%, "
                    f"{timing.method}).")
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


def _plain(t):
    """A plain torch.Tensor view of t (tensor subclasses cannot intercept the comparison)."""
    if isinstance(t, torch.Tensor) and type(t) is not torch.Tensor:
        return t.as_subclass(torch.Tensor)
    return t


def evaluate_job(payload: dict[str, Any]) -> dict[str, Any]:
    """Worker target for WorkerEvaluator.evaluate."""
    return Evaluation(payload).run()


# ------------------------------------------------------------------------------- baselines

def baselines_job(payload: dict[str, Any]) -> dict[str, Any]:
    """Worker target for WorkerEvaluator.baselines: the reference as eager and torch.compile."""
    from egg_mcp.evaluation.timing import GpuTimer

    opts = EvalOptions.model_validate(payload["options"])
    torch.set_grad_enabled(False)
    env = env_info(False)
    seeds = list(payload["seeds"])
    workdir = Path(os.getcwd()) / "src"
    workdir.mkdir(exist_ok=True)
    _phase("load", message="loading the reference")
    reference = load_module(payload["reference_source"], workdir / "reference.py", "egg_reference")
    apply_size_overrides(reference, None, opts.size_overrides)
    problem = Problem(reference, "cuda", DTYPES[opts.dtype])
    init_seed = int(payload["init_seed"])
    model = problem.build(reference.Model, problem.init_inputs(init_seed), init_seed)
    cache: dict[int, list] = {}

    def make_inputs(k: int) -> list:
        if k not in cache:
            cache[k] = problem.inputs(seeds.pop() if seeds else secrets.randbits(62))
        return cache[k]

    _phase("run", message="timing eager PyTorch")
    timer = GpuTimer(torch.cuda.current_device())
    eager, _ = timer.measure(lambda xs: model(*xs), make_inputs, n_runs=opts.timing_trials)
    result = BaselineResult(eager=eager, env=env)
    _phase("compile", message="torch.compile of the reference")
    try:
        compiled_model = torch.compile(model)
        compiled_model(*make_inputs(0))
        torch.cuda.synchronize()
        _phase("timing", message="timing torch.compile")
        result.compiled, _ = timer.measure(lambda xs: compiled_model(*xs), make_inputs, n_runs=opts.timing_trials)
    except Exception as exc:  # noqa: BLE001
        result.compile_error = f"{type(exc).__name__}: {str(exc)[:1500]}"
    return result.model_dump()
