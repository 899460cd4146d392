"""The host audit's instruments (host_audit.py says what each one sees and why): the audit hook, the wrappers on
torch.Tensor's host-transfer methods, the profiler armed around candidate code, and the pause of that
profiler inside Triton's launch. Each is built from a HostAudit and reports to it through the audit event.
"""

from __future__ import annotations

import _thread
import os
import sys
import threading
import types
from typing import TYPE_CHECKING, Any

import torch

from egg_mcp.evaluation.host_routes import (
    ANY,
    CAND,
    CODE,
    CODE_EVENTS,
    DENY_EVENTS,
    DEVICE_METHODS,
    EVENT,
    FRAME,
    FRAME_EVENTS,
    HOST_METHODS,
    HOST_PY_METHODS,
    NATIVE_EVENTS,
    OTHER,
    WATCHED,
    package_dir,
)

if TYPE_CHECKING:
    from egg_mcp.evaluation.host_audit import HostAudit


def make_hook(audit: HostAudit, busy: set[int]):
    """The audit hook: native code, exec/compile, frame and gc introspection, reads of the reference's file,
    and refused attempts to replace the profiler, tracer or audit hooks; the wrappers' and the profiler's
    reports arrive through it as EVENT."""
    getframe = sys._getframe
    get_ident = _thread.get_ident
    watched = WATCHED
    native, code_events, frame_events, deny = NATIVE_EVENTS, CODE_EVENTS, FRAME_EVENTS, DENY_EVENTS
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


def wrap_tensor_methods(audit: HostAudit, armed: list[bool], busy: set[int]) -> None:
    """Wrap torch.Tensor's host-transfer methods; armed (in forward), a call from the candidate is reported."""
    getframe = sys._getframe
    raise_event = sys.audit
    get_ident = _thread.get_ident

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


def _dispatch_toggles() -> dict[Any, str]:
    """torch._C's functions that set, push, pop, enable or disable dispatch keys and modes (not the readers)."""
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
    return toggles



def _switch_off_codes() -> dict[Any, tuple[str, str]]:
    """Code objects of the Python functions that switch the dispatch mode or the profiler off."""
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
    return codes



def make_profiler(audit: HostAudit, native_ok: dict[int, bool], cffi: str | None, allowed: tuple[str, ...]):
    """The profiler armed around candidate code: TensorBase host methods, dispatch/mode toggles, a dispatch
    state that escaped the harness's mode, calls into cffi and into native modules outside `allowed`."""
    raise_event = sys.audit
    tensor_base = torch._C.TensorBase
    host_names = frozenset(HOST_METHODS) | {"to", "copy_", "_to_dlpack", "to_dlpack", "_dlpack"}
    module_type = types.ModuleType
    toggles = _dispatch_toggles()
    codes = _switch_off_codes()
    excluded = torch._C._dispatch_tls_is_dispatch_key_excluded
    python_key = torch._C.DispatchKey.Python
    stack_len = torch._C._len_torch_dispatch_stack
    cffi_dir = [cffi]
    candidate_code = (CAND, OTHER)
    category = audit.category

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
                       "harness's dispatch mode (_DisableTorchDispatch, a dispatch key guard, an emptied mode stack, "
                       "or a thread it "
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
            cffi_dir[0] = package_dir("cffi")

    profiler.refresh = refresh_cffi  # type: ignore[attr-defined]
    return profiler


def quiet_triton_launches(audit: HostAudit) -> None:
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
