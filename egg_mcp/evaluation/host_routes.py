"""What the host audit (host_audit.py) watches and how it tells whose code a frame is: the audit event it
reports through, the frame categories of the stack walk and where each walk stops, the audit events and the
torch.Tensor methods of each route, and the package directories the categories are read from.
"""

from __future__ import annotations

import os
import sys
import sysconfig

EVENT = "egg_mcp.host_audit"
"""The audit event the wrappers and the profiler raise to report (check, route, where)."""

# Frame categories (of a code object's co_filename).
CAND, EGG, TRITON, TRITON_BUILD, TORCH, INFRA, OTHER = range(7)

ANY = frozenset({EGG, TRITON})  # the walk stops (not the candidate's) at the harness or triton
CODE = frozenset({EGG, TRITON, TRITON_BUILD, INFRA})  # exec/compile: the stdlib's code generators stop it too
FRAME = frozenset({EGG, TRITON, TRITON_BUILD, INFRA, TORCH})  # frame introspection: torch uses it internally

INFRA_FILES = ("dataclasses.py", "typing.py", "enum.py", "warnings.py", "abc.py", "functools.py", "inspect.py",
                "linecache.py", "traceback.py", "contextlib.py", "weakref.py", "_weakrefset.py", "copyreg.py",
                os.path.join("collections", "__init__.py"), os.path.join("logging", "__init__.py"))

HOST_METHODS = ("cpu", "numpy", "tolist", "item", "untyped_storage", "__float__", "__int__", "__complex__")
"""torch.Tensor methods (C) that bring tensor data to the host."""
HOST_PY_METHODS = ("__array__", "__repr__", "__format__", "__reduce_ex__", "__dlpack__", "storage", "_typed_storage")
"""torch.Tensor methods written in Python (torch/_tensor.py) that read tensor data on the host."""
DEVICE_METHODS = ("to", "copy_")
"""Checked by effect: a result (or source) on the host while the tensor was on a device."""

NATIVE_EVENTS = frozenset({
    "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.call_function", "ctypes.cdata",
    "ctypes.cdata/buffer", "ctypes.string_at", "ctypes.wstring_at", "ctypes.create_string_buffer",
    "ctypes.create_unicode_buffer", "ctypes.addressof", "ctypes.PyObj_FromPtr", "ctypes.set_errno",
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "os.startfile", "pty.spawn", "_posixsubprocess.fork_exec", "os.add_dll_directory", "mmap.__new__",
})
CODE_EVENTS = frozenset({"exec", "compile", "code.__new__", "function.__new__", "marshal.loads"})
FRAME_EVENTS = frozenset({"sys._getframe", "sys._current_frames", "sys._current_exceptions", "gc.get_objects",
                           "gc.get_referrers", "gc.get_referents", "sys._getframemodulename",
                           "object.__getattr__", "object.__setattr__", "object.__delattr__"})
DENY_EVENTS = frozenset({"sys.setprofile", "sys.settrace", "sys._setprofileallthreads", "sys._settraceallthreads",
                          "sys.addaudithook", "sys.monitoring.register_callback", "cpython.PyInterpreterState_Clear",
                          "cpython._PySys_ClearAuditHooks", "sys.remote_exec"})
WATCHED = NATIVE_EVENTS | CODE_EVENTS | FRAME_EVENTS | DENY_EVENTS | {"open", EVENT}


def package_dir(name: str) -> str | None:
    module = sys.modules.get(name)
    if module is None:
        try:
            module = __import__(name)
        except Exception:  # noqa: BLE001
            return None
    path = getattr(module, "__file__", None)
    return os.path.dirname(os.path.abspath(path)) + os.sep if path else None


def stdlib_dirs() -> tuple[str, ...]:
    out = set()
    for key in ("stdlib", "platstdlib"):
        try:
            out.add(os.path.abspath(sysconfig.get_paths()[key]) + os.sep)
        except Exception:  # noqa: BLE001
            pass
    return tuple(sorted(out))
