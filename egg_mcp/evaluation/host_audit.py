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

import _thread
import os
import sys
import sysconfig
import threading
import types
from typing import Any, Callable

import torch

EVENT = "egg_mcp.host_audit"
"""The audit event the wrappers and the profiler raise to report (check, route, where)."""

# Frame categories (of a code object's co_filename).
CAND, EGG, TRITON, TRITON_BUILD, TORCH, INFRA, OTHER = range(7)

ANY = frozenset({EGG, TRITON})  # the walk stops (not the candidate's) at the harness or triton
CODE = frozenset({EGG, TRITON, TRITON_BUILD, INFRA})  # exec/compile: the stdlib's code generators stop it too
FRAME = frozenset({EGG, TRITON, TRITON_BUILD, INFRA, TORCH})  # frame introspection: torch uses it internally

_INFRA_FILES = ("dataclasses.py", "typing.py", "enum.py", "warnings.py", "abc.py", "functools.py", "inspect.py",
                "linecache.py", "traceback.py", "contextlib.py", "weakref.py", "_weakrefset.py", "copyreg.py",
                os.path.join("collections", "__init__.py"), os.path.join("logging", "__init__.py"))

HOST_METHODS = ("cpu", "numpy", "tolist", "item", "untyped_storage", "__float__", "__int__", "__complex__")
"""torch.Tensor methods (C) that bring tensor data to the host."""
HOST_PY_METHODS = ("__array__", "__repr__", "__format__", "__reduce_ex__", "__dlpack__", "storage", "_typed_storage")
"""torch.Tensor methods written in Python (torch/_tensor.py) that read tensor data on the host."""
DEVICE_METHODS = ("to", "copy_")
"""Checked by effect: a result (or source) on the host while the tensor was on a device."""

_NATIVE_EVENTS = frozenset({
    "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.call_function", "ctypes.cdata",
    "ctypes.cdata/buffer", "ctypes.string_at", "ctypes.wstring_at", "ctypes.create_string_buffer",
    "ctypes.create_unicode_buffer", "ctypes.addressof", "ctypes.PyObj_FromPtr", "ctypes.set_errno",
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "os.startfile", "pty.spawn", "_posixsubprocess.fork_exec", "os.add_dll_directory", "mmap.__new__",
})
_CODE_EVENTS = frozenset({"exec", "compile", "code.__new__", "function.__new__", "marshal.loads"})
_FRAME_EVENTS = frozenset({"sys._getframe", "sys._current_frames", "sys._current_exceptions", "gc.get_objects",
                           "gc.get_referrers", "gc.get_referents", "sys._getframemodulename",
                           "object.__getattr__", "object.__setattr__", "object.__delattr__"})
_DENY_EVENTS = frozenset({"sys.setprofile", "sys.settrace", "sys._setprofileallthreads", "sys._settraceallthreads",
                          "sys.addaudithook", "sys.monitoring.register_callback", "cpython.PyInterpreterState_Clear",
                          "cpython._PySys_ClearAuditHooks", "sys.remote_exec"})
_WATCHED = _NATIVE_EVENTS | _CODE_EVENTS | _FRAME_EVENTS | _DENY_EVENTS | {"open", EVENT}


def _package_dir(name: str) -> str | None:
    module = sys.modules.get(name)
    if module is None:
        try:
            module = __import__(name)
        except Exception:  # noqa: BLE001
            return None
    path = getattr(module, "__file__", None)
    return os.path.dirname(os.path.abspath(path)) + os.sep if path else None


def _stdlib_dirs() -> tuple[str, ...]:
    out = set()
    for key in ("stdlib", "platstdlib"):
        try:
            out.add(os.path.abspath(sysconfig.get_paths()[key]) + os.sep)
        except Exception:  # noqa: BLE001
            pass
    return tuple(sorted(out))


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
        self._triton = _package_dir("triton")
        self._torch = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
        self._numpy = _package_dir("numpy")
        self._cffi = _package_dir("cffi") if "cffi" in sys.modules else None
        self._stdlib = _stdlib_dirs()
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
        if any(path.startswith(d) for d in self._stdlib) and path.endswith(_INFRA_FILES):
            return INFRA
        if path.startswith(os.path.join(sys.prefix, "lib")) and path.endswith(_INFRA_FILES):
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
        sys.addaudithook(self._make_hook())
        self._wrap_tensor_methods()
        self.profiler = self._make_profiler()
        self._quiet_triton_launches()

    def _make_hook(self):
        audit = self
        getframe = sys._getframe
        get_ident = _thread.get_ident
        busy = self._busy
        watched = _WATCHED
        native, code_events, frame_events, deny = _NATIVE_EVENTS, _CODE_EVENTS, _FRAME_EVENTS, _DENY_EVENTS
        fspath, abspath = os.fspath, os.path.abspath

        def hook(event: str, args: tuple) -> None:
            if event not in watched:
                return
            if event == EVENT:
                if len(args) == 4:
                    audit.add(str(args[0]), str(args[1]), str(args[2]), args[3])
                return
            tid = get_ident()
            if tid in busy:
                return
            busy.add(tid)
            try:
                frame = getframe(1)
                if event == "open":
                    if not audit.reference_paths or not args or isinstance(args[0], int):
                        return
                    try:
                        path = abspath(fspath(args[0]))
                    except Exception:  # noqa: BLE001
                        return
                    if path not in audit.reference_paths and os.path.realpath(path) not in audit.reference_paths:
                        return
                    line = audit.owner(frame, ANY)
                    if line is not None:
                        audit.add("dispatch_escape", "read reference source", "candidate code opened the "
                                  "reference's source file (to run the reference's code outside the op checks)",
                                  line)
                    return
                if event in native:
                    line = audit.owner(frame, ANY)
                    if line is not None:
                        route = event.split(".")[0] if event.startswith("ctypes") else event
                        what = ("ctypes (native code that is not a Triton kernel)" if route == "ctypes" else
                                "a process/exec call (a compiler or other program run by the candidate)"
                                if event != "mmap.__new__" else "mmap (raw host memory)")
                        audit.add("native_code", route, f"candidate code used {what}: {event}", line)
                    return
                if event in code_events:
                    line = audit.owner(frame, CODE)
                    if line is not None:
                        audit.add("dispatch_escape", event, f"candidate code ran {event} on source or code it "
                                  "built at run time (code the checks cannot attribute)", line)
                    return
                if event in frame_events:
                    if event.startswith("object.") and audit.phase != "forward":
                        return
                    line = audit.owner(frame, FRAME)
                    if line is not None:
                        audit.add("dispatch_escape", event, f"candidate code used {event}"
                                  f"{' ' + str(args[1]) if event.startswith('object.') and len(args) > 1 else ''}"
                                  " (introspection of the harness's frames/objects)", line)
                    return
                if event in deny:
                    line = audit.owner(frame, ANY)
                    if line is not None:
                        audit.add("dispatch_escape", "instrument off", f"candidate code called {event} (it would "
                                  "replace the harness's profiler/tracer/audit hook); refused", line)
                        raise RuntimeError(f"{event} is not available to candidate code")
            finally:
                busy.discard(tid)

        return hook

    def _wrap_tensor_methods(self) -> None:
        audit = self
        getframe = sys._getframe
        raise_event = sys.audit
        armed = self._armed
        get_ident = _thread.get_ident
        busy = self._busy

        def caller_line() -> int | None:
            tid = get_ident()
            busy.add(tid)  # our own sys._getframe is not the candidate's introspection
            try:
                return audit.owner(getframe(2), ANY)
            finally:
                busy.discard(tid)

        def make(name: str, original):
            def wrapper(self, *args, **kwargs):
                if armed[0]:
                    line = caller_line()
                    if line is not None:
                        raise_event(EVENT, "host_compute", f"Tensor.{name}", f"candidate code read tensor data on "
                                    f"the host (Tensor.{name}) inside forward", line)
                return original(self, *args, **kwargs)
            wrapper.__name__ = name
            wrapper.__qualname__ = f"Tensor.{name}"
            return wrapper

        def make_device(name: str, original):
            def wrapper(self, *args, **kwargs):
                out = original(self, *args, **kwargs)
                if armed[0]:
                    if name == "to":
                        moved = (isinstance(out, torch.Tensor) and out.device.type == "cpu"
                                 and self.device.type != "cpu")
                    else:
                        src = args[0] if args else kwargs.get("src")
                        moved = (isinstance(src, torch.Tensor) and self.device.type == "cpu"
                                 and src.device.type != "cpu")
                    if moved:
                        line = caller_line()
                        if line is not None:
                            raise_event(EVENT, "host_compute", f"Tensor.{name}", "candidate code copied tensor "
                                        f"data from the device to the host (Tensor.{name}) inside forward", line)
                return out
            wrapper.__name__ = name
            wrapper.__qualname__ = f"Tensor.{name}"
            return wrapper

        for name in HOST_METHODS + HOST_PY_METHODS:
            original = getattr(torch.Tensor, name, None)
            if original is not None:
                setattr(torch.Tensor, name, make(name, original))
        for name in DEVICE_METHODS:
            original = getattr(torch.Tensor, name, None)
            if original is not None:
                setattr(torch.Tensor, name, make_device(name, original))

    def _make_profiler(self):
        audit = self
        raise_event = sys.audit
        tensor_base = torch._C.TensorBase
        host_names = frozenset(HOST_METHODS) | {"to", "copy_", "_to_dlpack", "to_dlpack", "_dlpack"}
        module_type = types.ModuleType
        native_ok = self._native_ok
        toggles = {}
        for name in dir(torch._C):
            low = name.lower()
            if low.startswith(("_is_", "_has_", "_get_", "_len", "is_", "has_", "get_")):
                continue  # readers, not toggles
            if any(w in low for w in ("_is_", "keyset", "key_set", "to_string", "_jit_", "_disabled_torch", "report_error",
                                      "autograd_fallback", "local_exclude_set", "local_include_set")):
                continue
            if any(w in low for w in ("dispatch", "torch_function", "mode", "python_dispatcher", "functorch")) and any(
                    w in low for w in ("set", "push", "pop", "disable", "enable", "exclude", "include", "guard")):
                obj = getattr(torch._C, name, None)
                if callable(obj):
                    try:
                        toggles[obj] = f"torch._C.{name}"
                    except TypeError:
                        pass
        codes: dict[Any, tuple[str, str]] = {}
        import torch.utils._python_dispatch as pd

        for name in dir(pd):
            obj = getattr(pd, name, None)
            code = getattr(getattr(obj, "__wrapped__", None), "__code__", None) or getattr(obj, "__code__", None)
            if code is not None and code.co_filename == pd.__file__ and any(
                    w in name for w in ("disable", "pop_mode", "push_mode", "set_mode")):
                codes[code] = ("dispatch_escape", f"torch.utils._python_dispatch.{name}")
        for name in ("setprofile", "settrace", "setprofile_all_threads", "settrace_all_threads"):
            code = getattr(getattr(threading, name, None), "__code__", None)
            if code is not None:
                codes[code] = ("dispatch_escape", f"threading.{name}")
        excluded = torch._C._dispatch_tls_is_dispatch_key_excluded
        python_key = torch._C.DispatchKey.Python
        stack_len = torch._C._len_torch_dispatch_stack
        cffi_dir = [self._cffi]
        allowed = self._allowed_native
        candidate_code = (CAND, OTHER)
        category = self.category

        def report(frame, check, route, detail, stop=ANY):
            line = audit.owner(frame, stop)
            if line is not None:
                raise_event(EVENT, check, route, detail, line)

        def native_module_ok(mod) -> bool:
            ok = native_ok.get(id(mod))
            if ok is None:
                path = getattr(mod, "__file__", None)
                ok = path is None or os.path.abspath(path).startswith(allowed)
                native_ok[id(mod)] = ok
            return ok

        def profiler(frame, event, arg):
            if event == "c_call":
                owner = getattr(arg, "__self__", None)
                name = getattr(arg, "__name__", None)
                if name in host_names and isinstance(owner, tensor_base):
                    if name in ("to", "copy_"):
                        return  # checked by effect in the torch.Tensor wrappers
                    report(frame, "host_compute", f"TensorBase.{name}", f"candidate code read tensor data on the "
                           f"host (torch._C.TensorBase.{name}) inside forward")
                elif type(owner) is module_type and not native_module_ok(owner):
                    report(frame, "native_code", f"module {owner.__name__}", "candidate code called native code "
                           f"that is neither torch's, triton's, numpy's nor the stdlib's: {owner.__name__}.{name} "
                           f"({getattr(owner, '__file__', '?')})")
                else:
                    try:
                        toggle = toggles.get(arg)
                    except TypeError:
                        toggle = None
                    if toggle is not None:
                        report(frame, "dispatch_escape", toggle, f"candidate code called {toggle} (a torch dispatch/"
                               "mode toggle that switches the op checks off)")
                if category(frame.f_code.co_filename) in candidate_code and (
                        excluded(python_key) or stack_len() == 0):
                    report(frame, "dispatch_escape", "dispatch state", "candidate code ran torch ops without the "
                           "harness's dispatch mode (_DisableTorchDispatch, a dispatch key guard, an emptied mode stack, or a thread it "
                           "started): they escaped the op checks")
            elif event == "call":
                code = frame.f_code
                hit = codes.get(code)
                if hit is not None:
                    report(frame.f_back, hit[0], hit[1], f"candidate code called {hit[1]} (it switches the harness's "
                           "dispatch mode or profiler off)")
                elif cffi_dir[0] and code.co_filename.startswith(cffi_dir[0]):
                    report(frame.f_back, "native_code", "cffi", "candidate code used cffi (native code that is not "
                           "a Triton kernel)")

        def refresh_cffi() -> None:
            if cffi_dir[0] is None and "cffi" in sys.modules:
                cffi_dir[0] = _package_dir("cffi")

        profiler.refresh = refresh_cffi  # type: ignore[attr-defined]
        return profiler

    def _quiet_triton_launches(self) -> None:
        """The profiler pauses inside Triton's launch (JITFunction.run / InterpretedFunction.run): there the
        interpreter runs thousands of Python calls per kernel (the profiler made interpreter trials ~15x slower)
        and the GPU launch path ~20 us of Python. The audit hook and the Tensor wrappers stay on there."""
        import triton.runtime.jit as jit

        classes: list[type] = [jit.JITFunction]
        try:
            from triton.runtime.interpreter import InterpretedFunction

            classes.append(InterpretedFunction)
        except Exception:  # noqa: BLE001
            pass
        getprofile, setprofile = sys.getprofile, sys.setprofile
        audit = self

        def make(original):
            def run(fn_self, *args, **kwargs):
                profiler = getprofile()
                if profiler is None or profiler is not audit.profiler:
                    return original(fn_self, *args, **kwargs)
                setprofile(None)
                try:
                    return original(fn_self, *args, **kwargs)
                finally:
                    setprofile(profiler)
            run.__name__ = getattr(original, "__name__", "run")
            run.__wrapped__ = original  # type: ignore[attr-defined]
            return run

        for cls in classes:
            original = cls.__dict__.get("run")
            if original is not None:
                setattr(cls, "run", make(original))

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
