"""Host-side audit of candidate code: compute that leaves the candidate's Triton kernels (issue 27 item 4).

The dispatch-level instruments (integrity.py) see torch ops; they do not see a candidate that launches a
token Triton kernel and computes the answer on the host (numpy after `.cpu()`, `.tolist()` and Python math),
in native code of its own (ctypes, cffi, a compiler run through subprocess), or after switching the
dispatch-level instruments off (`_disable_current_modes`, `torch._C._DisableTorchDispatch`, exec of the
reference's source). Three instruments, installed in the runner before the reference and the candidate
are imported, report those routes as findings:

* an audit hook (`sys.addaudithook`; Python offers no way to remove one) for ctypes loads/calls,
  subprocesses, os.system/exec/spawn/fork, exec/compile of source, reads of the reference's file, frame
  and gc introspection; it refuses (raises in) the candidate's attempts to replace or add profilers,
  tracers and audit hooks, so the profiler below cannot be switched off from Python;
* Python-level wrappers on torch.Tensor's host-transfer methods (cpu, numpy, tolist, item, float(),
  __array__, repr/format, storage access, pickling, dlpack, `to`/`copy_` to the host), which see calls
  from C too (`map(torch.Tensor.tolist, xs)`, `np.asarray(t)`) and in every thread;
* a profiler (`sys.setprofile` + `threading.setprofile`) active only while candidate code runs (import,
  __init__, the correctness forwards; never in the timed region): the same methods reached through
  `torch._C.TensorBase`, torch._C dispatch/mode toggles, a dispatch state with the Python key excluded or
  the mode stack emptied, calls into cffi and into native modules that are not torch/triton/numpy/stdlib.

Every event is attributed by walking the Python stack: an event is the candidate's when the walk reaches a
frame of the candidate's file before one of triton's (the interpreter and the JIT launch path, which use
numpy, `.cpu()` and subprocesses on the candidate's behalf) or the harness's. Frames of torch, numpy, the
stdlib and other libraries in between are the candidate's helpers (`np.asarray` -> Tensor.__array__);
for exec/compile and frame introspection the stdlib's own code generators (dataclasses, namedtuple,
typing, importlib, warnings, logging) end the walk. Findings reach the harness through `sys.audit` events,
so the profiler and the wrappers hold no reference to the findings store.

Like everything in the runner this shares the candidate's process: it raises the bar, it is not a sandbox
(see the limits listed in report_limits()).
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, Callable

import torch

from egg_mcp.evaluation.host_instruments import (
    make_hook,
    make_profiler,
    quiet_triton_launches,
    wrap_tensor_methods,
)
from egg_mcp.evaluation.host_routes import (
    CAND,
    EGG,
    INFRA,
    INFRA_FILES,
    OTHER,
    TORCH,
    TRITON,
    TRITON_BUILD,
    package_dir,
    stdlib_dirs,
)


class HostAudit:
    """One per runner: install() once before any candidate code, arm()/disarm() around candidate code."""

    def __init__(self) -> None:
        self.candidate_paths: set[str] = set()
        self.reference_paths: set[str] = set()
        self.findings: dict[tuple[str, str], list] = {}  # (check, route) -> [detail, count, where]
        self.reported: set[tuple[str, str]] = set()
        self.phase = "idle"  # import | init | forward
        self.installed = False
        self._categories: dict[str, int] = {}
        self._busy: set[int] = set()
        self._egg = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
        self._triton = package_dir("triton")
        self._torch = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
        self._numpy = package_dir("numpy")
        self._cffi = package_dir("cffi") if "cffi" in sys.modules else None
        self._stdlib = stdlib_dirs()
        self._allowed_native = tuple(p for p in (self._torch, self._triton, self._numpy, *self._stdlib) if p)
        self._native_ok: dict[int, bool] = {}
        self._modules_before: set[str] = set()
        self.profiler: Callable | None = None
        self._armed = [False]

    # -- attribution -------------------------------------------------------------------------------
    def category(self, filename: str) -> int:
        cat = self._categories.get(filename)
        if cat is None:
            cat = self._categorize(filename)
            self._categories[filename] = cat
        return cat

    def _categorize(self, filename: str) -> int:
        if filename in self.candidate_paths:
            return CAND
        if filename.startswith("<frozen importlib") or filename.startswith("<frozen zipimport"):
            return INFRA
        path = os.path.abspath(filename) if filename and not filename.startswith("<") else filename
        if path in self.candidate_paths:
            return CAND
        if path.startswith(self._egg):
            return EGG
        if self._triton and path.startswith(self._triton):
            return TRITON_BUILD if path.endswith(os.path.join("runtime", "build.py")) else TRITON
        if path.startswith(self._torch):
            return TORCH
        if any(path.startswith(d) for d in self._stdlib) and path.endswith(INFRA_FILES):
            return INFRA
        if path.startswith(os.path.join(sys.prefix, "lib")) and path.endswith(INFRA_FILES):
            return INFRA
        return OTHER

    def owner(self, frame, stop: frozenset) -> int | None:
        """The candidate's line whose call led to `frame`'s event, or None when it is not the candidate's."""
        depth = 0
        category = self.category
        while frame is not None and depth < 200:
            cat = category(frame.f_code.co_filename)
            if cat == CAND:
                return frame.f_lineno
            if cat in stop:
                return None
            frame = frame.f_back
            depth += 1
        return None

    # -- findings ----------------------------------------------------------------------------------
    def add(self, check: str, route: str, detail: str, where: Any = None) -> None:
        entry = self.findings.get((check, route))
        if entry is None:
            self.findings[(check, route)] = [detail, 1, where]
        else:
            entry[1] += 1

    def drain(self) -> list[tuple[str, str]]:
        """(check, detail) for each route seen since the last drain (one finding per route)."""
        out = []
        for key, (detail, count, where) in list(self.findings.items()):
            if key in self.reported:
                continue
            self.reported.add(key)
            at = f" (candidate line {where})" if isinstance(where, int) else ""
            times = f", {count}x" if count > 1 else ""
            out.append((key[0], f"{detail}{at}{times}"))
        return out

    # -- installation ------------------------------------------------------------------------------
    def add_candidate(self, candidate_path: str) -> None:
        self.candidate_paths.update({candidate_path, os.path.abspath(candidate_path), os.path.realpath(candidate_path)})
        self._categories.clear()

    def add_reference(self, reference_path: str) -> None:
        self.reference_paths.update({reference_path, os.path.abspath(reference_path),
                                     os.path.realpath(reference_path)})

    def install(self, candidate_path: str | None = None, reference_path: str | None = None) -> None:
        if candidate_path:
            self.add_candidate(candidate_path)
        if reference_path:
            self.add_reference(reference_path)
        self._categories.clear()
        if self.installed:
            return
        self.installed = True
        self._modules_before = set(sys.modules)
        sys.addaudithook(make_hook(self, self._busy))
        wrap_tensor_methods(self, self._armed, self._busy)
        self.profiler = make_profiler(self, self._native_ok, self._cffi, self._allowed_native)
        quiet_triton_launches(self)

    # -- around candidate code ----------------------------------------------------------------------
    def arm(self, phase: str, candidate_path: str | None = None) -> None:
        """Candidate code is about to run: profiler on (this thread and threads started from now on)."""
        if candidate_path:
            self.add_candidate(candidate_path)
        self.phase = phase
        self._armed[0] = phase == "forward"
        profiler = self.profiler
        if profiler is None:
            return
        profiler.refresh()  # type: ignore[attr-defined]
        threading.setprofile(profiler)
        sys.setprofile(profiler)

    def disarm(self) -> None:
        profiler = self.profiler
        if profiler is None:
            return
        current = sys.getprofile()
        thread_profile = threading.getprofile() if hasattr(threading, "getprofile") else profiler
        sys.setprofile(None)
        threading.setprofile(None)
        self._armed[0] = False
        if current is not profiler:
            self.add("dispatch_escape", "profiler replaced", "the harness's profiler was switched off or replaced "
                     "while candidate code ran")
        if thread_profile is not profiler:
            self.add("dispatch_escape", "thread profiler replaced", "threading.setprofile was changed while candidate "
                     "code ran (threads it started ran unobserved)")
        self.phase = "idle"

    def check_modules(self) -> None:
        """Native modules the candidate loaded (cffi, extensions built from its own source)."""
        for name, module in list(sys.modules.items()):
            if name in self._modules_before:
                continue
            path = getattr(module, "__file__", None) or ""
            if name in ("_cffi_backend", "cffi"):
                self.add("native_code", "cffi", "candidate code imported cffi (native code that is not a Triton "
                         "kernel)")
            elif path.endswith((".so", ".pyd", ".dylib")) and not os.path.abspath(path).startswith(
                    self._allowed_native):
                self.add("native_code", f"extension {name}", f"candidate code loaded the compiled extension {name} "
                         f"({path})")
        self._modules_before = set(sys.modules)


def report_limits() -> list[str]:
    """What these instruments cannot see (in-process, same interpreter as the candidate)."""
    return [
        "a candidate that rebinds the instruments' closure cells or reaches their objects without frames/gc",
        "torch._C.TensorBase host methods called through C higher-order builtins (map/functools.partial) "
        "outside any profiled Python call",
        "threads started with _thread.start_new_thread after clearing threading's profile hook",
    ]
