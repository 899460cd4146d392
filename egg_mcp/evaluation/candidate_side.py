"""The untrusted runner's work (imported by runner.py after it confined itself): CandidateSide and serve.

The only process that imports candidate code. The judge (judge.py) starts it with an allow-listed
environment (no token, no EGG_MCP_*), a private working directory, no file descriptor but its own
channel (stdout/stderr are the worker's log pipes), in its own process group, and kills it and
every descendant as soon as it has what it needs. Before the candidate is imported the runner
confines itself (egg_mcp.sandbox via confinement.py) and installs the in-process integrity
instruments; it then answers the judge's commands (load, trial, report, time, calls, guard, exit)
with DATA: output tensors as raw bytes, timing samples, findings. It never sees a reference output
and decides nothing: everything it sends may have been written by the candidate (which shares its
process), and the judge treats it that way.
"""

from __future__ import annotations

import secrets
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import torch
import torch.utils.deterministic  # noqa: F401  (its flag poisons fresh allocations)

from egg_mcp.evaluation import launchers, wire
from egg_mcp.contract import EvalOptions, IntegrityFinding, KernelInfo
from egg_mcp.evaluation.bounds import Bounds, apply_rlimits
from egg_mcp.evaluation.compile_clock import CompileClock
from egg_mcp.evaluation.errors import classify
from egg_mcp.evaluation.exchange import DeviceExchange, OutputExchange, Placer
from egg_mcp.evaluation.failures import _failure
from egg_mcp.evaluation.guard import GuardedAllocations, guard_inputs
from egg_mcp.evaluation.host_audit import HostAudit
from egg_mcp.evaluation.integrity import AttributeSnapshot, LaunchCounter, OpRecorder, new_live_threads
from egg_mcp.problems.modules import import_source
from egg_mcp.problems.problem import DTYPES, Problem, apply_size_overrides
from egg_mcp.evaluation.timed_audit import TimedCallAudit  # its torch entry points taken before any candidate code

# Trusted references, taken before any candidate code is imported.
_clone = torch.Tensor.clone
_equal = torch.equal
_set_deterministic = torch._C._set_deterministic_algorithms  # not torch.use_deterministic_algorithms: that
# imports torch._inductor/_dynamo (3-4 s of CPU per runner) only to set an inductor flag we do not use
_deterministic_enabled = torch.are_deterministic_algorithms_enabled


def _use_deterministic(mode: bool, warn_only: bool = False) -> None:
    _set_deterministic(mode, warn_only=warn_only)

_det_module = sys.modules["torch.utils.deterministic"]
_enumerate_threads = threading.enumerate
_perf_counter = time.perf_counter
_cuda_synchronize = torch.cuda.synchronize


PREVIOUS_OUTPUT_BYTES = 256 << 20


def keep_recent(previous: list[torch.Tensor], new: list[torch.Tensor], cap: int = PREVIOUS_OUTPUT_BYTES) -> None:
    """Append this call's outputs; drop the oldest while more than `cap` bytes are kept (never this call's)."""
    previous.extend(new)
    while len(previous) > len(new) and sum(t.numel() * t.element_size() for t in previous) > cap:
        previous.pop(0)


class CandidateFailed(Exception):
    def __init__(self, message: dict[str, Any]):
        super().__init__(message.get("summary", ""))
        self.message = message


def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    a0, a1 = _storage_span(a)
    b0, b1 = _storage_span(b)
    return a0 < b1 and b0 < a1 and a1 > a0 and b1 > b0


def _plain(t):
    if isinstance(t, torch.Tensor) and type(t) is not torch.Tensor:
        return t.as_subclass(torch.Tensor)
    return t


class CandidateSide:
    """Runs the candidate under the integrity instruments; every answer is data for the judge."""

    def __init__(self, private: Path, interpreter: bool):
        self.private = private
        self.interpreter = interpreter
        self.device = "cpu" if interpreter else "cuda"
        self.findings: list[IntegrityFinding] = []
        self.sent_findings = 0
        self.ref_calls = {"init": 0, "forward": 0}
        self.candidate_active = False
        self.previous_outputs: list[torch.Tensor] = []
        self.kept: list | None = None
        # the judge's shared region for large outputs (exchange.py)
        self.exchange: OutputExchange | DeviceExchange | None = None
        self.candidate_path: str | None = None
        self.timer = None
        self.sandbox: dict[str, Any] | None = None
        self.namespaces: str | None = None  # the launcher's namespaces (runner.py's --namespaces)
        self.compile_clock = CompileClock()
        self.launcher_reports: list[dict[str, Any]] = []
        self.loaded = False

    def finding(self, check: str, detail: str, severity: Literal["violation", "review"] = "violation") -> None:
        self.findings.append(IntegrityFinding(check=check, severity=severity, detail=detail))

    def new_findings(self) -> list[dict]:
        out = [f.model_dump() for f in self.findings[self.sent_findings:]]
        self.sent_findings = len(self.findings)
        return out

    def sync(self) -> None:
        if self.device == "cuda":
            _cuda_synchronize()

    def take_exchange(self, cmd: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        """Map the judge's shared region (its descriptor came with the command); trial outputs go there."""
        if len(fds) != 1 or self.exchange is not None:
            raise ValueError(f"an exchange command carries one descriptor, once per job (got {len(fds)})")
        started = time.perf_counter()
        if cmd.get("where") == "device":  # the judge's GPU region; refused here, the judge offers a host one
            try:
                self.exchange = DeviceExchange(int(cmd["bytes"]), torch.cuda.current_device(), fd=fds.pop())
            except Exception as exc:  # noqa: BLE001
                return {"type": "exchange_ready", "ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
            return {"type": "exchange_ready", "ok": True, "setup_s": round(time.perf_counter() - started, 3)}
        self.exchange = OutputExchange(int(cmd["bytes"]), fd=fds.pop())
        registered = self.exchange.register_for_gpu() if self.device == "cuda" else False
        return {"type": "exchange_ready", "ok": True, "registered": registered,
                "setup_s": round(time.perf_counter() - started, 3)}

    # -- load ------------------------------------------------------------------------------------
    def load(self, cmd: dict[str, Any]) -> dict[str, Any]:
        self.loaded = True
        self.opts = EvalOptions.model_validate(cmd["options"])
        src = self.private / "work"
        src.mkdir(exist_ok=True)
        torch.set_grad_enabled(False)
        self.recorder = OpRecorder()
        self.recorder.__enter__()
        self.audit = HostAudit()  # audit hook, Tensor host-method wrappers: before any problem code, the snapshot and
        self.audit.install()  # the launch counter (which wraps the audit's Triton run wrapper)
        self.counter = LaunchCounter(self.recorder)
        self.counter.install()
        self.compile_clock.install()  # before the candidate's import: its kernels' compiles are timed
        if self.device == "cuda" and self.opts.timing:
            from egg_mcp.evaluation.timing import GpuTimer

            self.timer = GpuTimer(torch.cuda.current_device())
        self.snapshot = AttributeSnapshot()
        try:
            reference = import_source(cmd["reference_source"], src / "model.py", f"model_{secrets.token_hex(4)}")
        except BaseException as exc:  # noqa: BLE001
            raise CandidateFailed({**_failure("runtime_error", exc, None, "The reference failed to load in the "
                                              "runner"), "fault": "reference"}) from None
        self._wrap_reference(reference.Model)
        self.audit.add_reference(str(reference.__file__))  # reading this file from candidate code: dispatch_escape
        # plain names (a user's model_new.py): the candidate's __file__ and __name__ name no harness
        self.candidate_path = str(src / "model_new.py")
        try:
            self.audit.arm("import", candidate_path=self.candidate_path)
            try:
                candidate = import_source(cmd["candidate_source"], self.candidate_path, "model_new")
            finally:
                self._audit_findings()
        except BaseException as exc:  # noqa: BLE001
            verdict = "oom" if classify(exc) == "oom" else "compile_error"
            raise CandidateFailed(_failure(verdict, exc, self.candidate_path, "Importing the candidate failed"))
        if not isinstance(getattr(candidate, "ModelNew", None), type):
            raise CandidateFailed({"verdict": "compile_error", "summary": "The candidate defines no class ModelNew; "
                                   "define ModelNew(nn.Module) with the same constructor and forward signature "
                                   "as Model.", "error": {"kind": "missing_ModelNew", "message": "no ModelNew"}})
        apply_size_overrides(reference, candidate, self.opts.size_overrides)  # validated by the judge already
        self.problem = Problem(reference, self.device, DTYPES[self.opts.dtype])
        init_seed = int(cmd["init_seed"])
        try:
            with self.candidate_call(poison=False, phase="init"):
                self.model = self.problem.build(candidate.ModelNew, self.problem.init_inputs(init_seed), init_seed)
        except BaseException as exc:  # noqa: BLE001
            raise CandidateFailed(_failure(classify(exc), exc, self.candidate_path, "Constructing ModelNew failed"))
        self.recorder.ops.clear()
        self.counter.reset()
        return {"type": "loaded"}

    def confine(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """What runner.py applied at start-up, before torch and long before any candidate code; and the job's
        resource bounds (bounds.py), set here as rlimits before the reference or the candidate is imported."""
        limits = Bounds.from_wire(cmd.get("bounds"))
        if limits is not None and not self.loaded:
            applied = apply_rlimits(limits, interpreter=self.interpreter, namespaces=self.namespaces)
            self.sandbox = {**(self.sandbox or {}), "rlimits": applied}
        return {"type": "confined", "sandbox": self.sandbox}

    def _wrap_reference(self, cls) -> None:
        side = self
        original_init, original_forward = cls.__init__, cls.forward

        def __init__(model_self, *args, **kwargs):
            if side.candidate_active:
                side.ref_calls["init"] += 1
            original_init(model_self, *args, **kwargs)

        def forward(model_self, *args, **kwargs):
            if side.candidate_active:
                side.ref_calls["forward"] += 1
            return original_forward(model_self, *args, **kwargs)

        cls.__init__, cls.forward = __init__, forward

    def _audit_findings(self) -> None:
        self.audit.disarm()
        for check, detail in self.audit.drain():
            self.finding(check, detail)

    @contextmanager
    def candidate_call(self, record_ops: bool = True, poison: bool = True, phase: str = "forward"):
        """Candidate code runs only inside this: ops recorded, launches counted, allocations poisoned,
        host-side routes audited (host_audit.py)."""
        threads_before = {t.ident for t in _enumerate_threads()}
        self.audit.arm(phase)
        self.candidate_active = True
        self.recorder.recording = record_ops
        self.counter.counting = True
        if self.device == "cuda":
            self.counter.expected_stream = torch.cuda.current_stream().cuda_stream
        if poison:
            _use_deterministic(True, warn_only=True)
            _det_module.fill_uninitialized_memory = True  # pyright: ignore[reportAttributeAccessIssue]  # (a property of torch's module class; its stubs do not show it)
        try:
            yield
            self.sync()
        finally:
            self._audit_findings()
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

    def _failed(self, exc: BaseException, what: str) -> CandidateFailed:
        return CandidateFailed(_failure(classify(exc), exc, self.candidate_path, what))

    # -- trials ----------------------------------------------------------------------------------
    def _inputs(self, cmd: dict[str, Any]) -> list:
        if cmd.get("use_kept") and self.kept is not None:
            inputs = self.kept
        else:
            inputs = self.problem.inputs(int(cmd["seed"]))
        if cmd.get("refill_seed") is not None:
            for old, new in zip(inputs, self.problem.inputs(int(cmd["refill_seed"]))):
                if isinstance(old, torch.Tensor) and old.shape == new.shape:
                    old.copy_(new)
        return inputs

    def trial(self, cmd: dict[str, Any]) -> tuple[dict[str, Any], list[memoryview]]:
        inputs = self._inputs(cmd)
        pristine = [_clone(x) if isinstance(x, torch.Tensor) else x for x in inputs]
        try:
            with self.candidate_call():
                self.counter.begin_call()
                out = self.model(*inputs)
            launches = self.counter.end_call()
        except BaseException as exc:  # noqa: BLE001
            raise self._failed(exc, f"ModelNew.forward failed ({cmd.get('stage', 'correctness')} trial "
                               f"{int(cmd.get('trial', 0)) + 1})") from None
        structure, leaves = wire.flatten_output(out)  # every part, nested (tuples, lists, dicts); judged as data
        outs = [o for _, o in leaves]
        # Earlier outputs are kept alive, so a fresh allocation can never reuse their address: an output
        # at the same address as an earlier one is a buffer the candidate kept between calls. Kept up to
        # PREVIOUS_OUTPUT_BYTES (at least the last call's): at 6 GiB per output, keeping every trial's filled the GPU.
        reused = any(isinstance(o, torch.Tensor) and o.numel() and any(
            _overlaps(o, p) for p in self.previous_outputs) for o in outs)
        keep_recent(self.previous_outputs, [o for o in outs if isinstance(o, torch.Tensor)])
        for i, o in leaves:
            if isinstance(o, torch.Tensor) and type(o) not in (torch.Tensor, torch.nn.Parameter):
                self.finding("tensor_subclass", f"{i} is a {type(o).__module__}.{type(o).__name__}, not a "
                             "plain torch.Tensor (subclasses can fake comparisons)")
            if isinstance(o, torch.Tensor):
                for j, x in enumerate(inputs):
                    if isinstance(x, torch.Tensor) and _overlaps(o, x):
                        self.finding("output_alias", f"{i} shares memory with input {j}: write a new "
                                     "output tensor instead of returning (a view of) an input")
        for j, (x, p) in enumerate(zip(inputs, pristine)):
            if isinstance(x, torch.Tensor) and not (x.shape == p.shape and _equal(_plain(x), p)):
                self.finding("input_mutation", f"input {j} was modified by ModelNew.forward; the reference "
                             "semantics leave inputs untouched: write to a new tensor")
        specs, blobs = wire.encode_values([_plain(o) for o in outs], Placer(self.exchange))
        return {"type": "outputs", "structure": structure, "values": specs, "reused": bool(reused),
                "findings": self.new_findings(),
                "launches": [[name, list(grid)] for name, grid in launches],
                **self.compile_clock.report(), **launchers.merge(self.launcher_reports)}, blobs

    def calls(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Repeated calls on one kept input set (the re-check's warm-up when there is no GPU timing)."""
        self.kept = self.problem.inputs(int(cmd["seed"]))
        try:
            for _ in range(int(cmd.get("n", 3))):
                with self.candidate_call(record_ops=False, poison=False):
                    self.model(*self.kept)
        except BaseException as exc:  # noqa: BLE001
            raise self._failed(exc, "ModelNew.forward failed on a repeated call") from None
        return {"type": "done", "findings": self.new_findings()}

    # -- integrity -------------------------------------------------------------------------------
    def report(self, cmd: dict[str, Any]) -> dict[str, Any]:
        forwards = max(1, int(cmd.get("forwards", 1)))
        torch_ops = self.recorder.compute_ops()
        self.audit.check_modules()
        for check, detail in self.audit.drain():
            self.finding(check, detail)
        if cmd.get("check"):
            self._check_static_integrity(torch_ops, self.counter.total() / forwards)
        kernels = []
        for name, count in self.counter.launches.items():
            info = dict(self.counter.info.get(name, {"name": name}))
            info["launches_per_forward"] = count / forwards
            kernels.append(KernelInfo.model_validate(info).model_dump())
        return {"type": "report", "kernels": kernels, "torch_ops": sorted(torch_ops),
                "findings": self.new_findings()}

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
        changed = self.snapshot.changed()
        if not self.counter.wrappers_installed() or not self.counter.hook_installed():
            changed.append("triton launch instrumentation")
        if changed:
            self.finding("monkeypatch", f"candidate code replaced {', '.join(changed[:10])}")

    def guard(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """One forward with guarded inputs and allocations; any changed guard byte is reported."""
        mode = GuardedAllocations()
        inputs = guard_inputs(self.problem.inputs(int(cmd["seed"])), mode.registry)
        try:
            with self.candidate_call(record_ops=False, poison=True):
                with mode:
                    self.model(*inputs)
                self.sync()
        except BaseException as exc:  # noqa: BLE001
            raise self._failed(exc, "ModelNew.forward failed in the guarded-memory check") from None
        return {"type": "guard", "violations": mode.violations(), "guarded": len(mode.registry),
                "findings": self.new_findings()}

    # -- timing (GPU) ------------------------------------------------------------------------------
    def time(self, cmd: dict[str, Any]) -> tuple[dict[str, Any], list]:
        """Times the candidate; the timed calls' launches and audited outputs go back with the numbers."""
        from egg_mcp.evaluation.timing import BUSY_MS, GpuTimer

        timer = self.timer or GpuTimer(torch.cuda.current_device())
        seeds = [int(s) for s in cmd["seeds"]]
        cache: dict[int, list] = {}
        model, counter = self.model, self.counter

        def make_inputs(k: int) -> list:
            if k not in cache:
                cache[k] = self.problem.inputs(seeds[k] if k < len(seeds) else secrets.randbits(62))
            return cache[k]

        audit = TimedCallAudit(self.problem.inputs, [int(s) for s in cmd.get("audit_seeds", [])])

        def call(xs: list):
            counter.begin_call()
            out = model(*xs)
            counter.end_call()
            return out

        self.counter.reset()
        self.counter.counting = True
        self.counter.expected_stream = None  # the timer itself launches on a capture stream for graphs
        self.recorder.__exit__(None, None, None)  # no per-op Python overhead inside the timed region
        try:
            try:
                stats, _ = timer.measure(call, make_inputs, n_runs=cmd.get("n_runs"), audit=audit)
            finally:
                self.counter.counting = False
            if self.counter.total() == 0:
                self.finding("no_triton_kernel", "no Triton kernel was launched while the candidate was timed "
                             "(it behaves differently when observed)")
            host_ms, synced_event_ms, busy_ms = timer.synced_reading(lambda xs: model(*xs), make_inputs(0))
            per_call = max(stats.median_ms, synced_event_ms)  # a busy shared GPU slows the synced calls' events too
            if host_ms > 3 * per_call + 1.0:
                busy = busy_ms > BUSY_MS  # time-sliced with other processes: no conclusion (timing.host_synced)
                why = (f"not judged, the GPU was busy with other processes (a call of ours waited {busy_ms:.3f} ms "
                       "too)" if busy else "work escapes the timed stream (side stream or thread)")
                self.finding("side_stream", f"a synchronised call takes {host_ms:.3f} ms on the host clock but the "
                             f"timer saw {per_call:.3f} ms: {why}", severity="review" if busy else "violation")
            elif host_ms > 1.5 * per_call + 0.2:
                self.finding("side_stream", f"host clock {host_ms:.3f} ms vs timed {per_call:.3f} ms per call "
                             "(launch overhead, or work escaping the timer)", severity="review")
            if stats.method == "cuda_events" and stats.host_wall_ms is not None and stats.mean_ms is not None:
                event_total = stats.mean_ms * stats.n_runs
                if stats.host_wall_ms < 0.9 * event_total - 1.0:
                    self.finding("monkeypatch", f"CUDA events report {event_total:.2f} ms in total but only "
                                 f"{stats.host_wall_ms:.2f} ms passed on the host clock")
            isolated_s = None
            if cmd.get("isolated"):
                t0 = _perf_counter()
                self.counter.counting = True
                try:
                    stats.isolated = timer.measure_isolated(call, make_inputs, audit=audit)
                except Exception as exc:  # noqa: BLE001 - an extra reading; its absence must not fail verify
                    stats.isolated_error = f"{type(exc).__name__}: {exc}"[:300]
                finally:
                    self.counter.counting = False
                isolated_s = _perf_counter() - t0
            audited, values = audit.wire_values()
            specs, blobs = wire.encode_values([_plain(v) for v in values])
        except CandidateFailed:
            raise
        except BaseException as exc:  # noqa: BLE001
            raise self._failed(exc, "The candidate failed while being timed") from None
        finally:
            self.recorder.__enter__()
        self.kept = make_inputs(0)
        timed_calls = [[[[n, list(g)] for n, g in sig], count] for sig, count in self.counter.call_signatures.items()]
        return {"type": "timing", "stats": stats.model_dump(), "isolated_s": isolated_s,
                "timed_calls": timed_calls[:64], "audited": audited, "values": specs,
                "findings": self.new_findings()}, blobs
