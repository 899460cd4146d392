"""Integrity instruments (run in the runner, installed BEFORE candidate code is imported).

* `OpRecorder` — a TorchDispatchMode that records the aten ops candidate code runs; anything not on
  the allow-list (allocation, views, copies, initialisation) is compute done by torch, not Triton.
* `LaunchCounter` — wraps `JITFunction.run` / `InterpretedFunction.run` (counts launches, keeps the
  compiled kernel's resource report) and adds a Triton launch-enter hook (GPU: catches launches on a
  stream other than the harness's).
* `AttributeSnapshot` — identities of the callables of torch, triton, time, threading and the
  harness modules, taken before the candidate runs; any that changed afterwards is monkeypatching.

All of this lives in the same process as the candidate (the runner): it raises the bar (and catches
the known public exploits), it is evidence for the judge, never a verdict, and it is not a sandbox. See
tests/adversarial/ for the exploit each check catches.
"""

from __future__ import annotations

import os
import sys
import threading
import types
from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

ALLOWED_OPS = frozenset(
    """
    empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros ones ones_like new_ones
    full full_like new_full fill fill_ zero_ arange scalar_tensor lift_fresh lift_fresh_copy
    view _unsafe_view view_as reshape _reshape_alias as_strided as_strided_ permute transpose transpose_ t t_
    expand expand_as squeeze squeeze_ unsqueeze unsqueeze_ flatten unflatten slice select split split_with_sizes
    chunk narrow unbind detach detach_ alias contiguous clone copy_ _to_copy to _copy_from resize_ set_
    movedim moveaxis swapaxes swapdims diagonal unfold view_as_real view_as_complex
    is_same_size is_nonzero sym_size sym_stride sym_numel sym_storage_offset _local_scalar_dense item
    _has_compatible_shallow_copy_type record_stream
    """.split()
)
"""aten ops a Triton candidate may run around its kernels (allocation, layout glue, initialisation).

Everything else counts as compute done by torch (add, mul, exp, sum, softmax, mm, conv, where, ...).
cat/stack are not allowed either: a Triton candidate writes its outputs from its kernels."""


class OpRecorder(TorchDispatchMode):
    """Counts the aten ops run while `recording` and not paused (paused inside Triton launches,
    where the interpreter itself moves tensors around)."""

    def __init__(self):
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.recording = False
        self.paused = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.recording and not self.paused:
            self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

    def compute_ops(self) -> dict[str, int]:
        return {name: n for name, n in sorted(self.ops.items()) if name.rstrip("_") not in ALLOWED_OPS
                and name not in ALLOWED_OPS}

    def still_installed(self) -> bool:
        return any(mode is self for mode in _get_current_dispatch_mode_stack())


class LaunchCounter:
    """Counts Triton launches and keeps one resource report per kernel name."""

    def __init__(self, recorder: OpRecorder | None = None):
        self.recorder = recorder
        self.counting = False
        self.launches: Counter[str] = Counter()
        self.info: dict[str, dict[str, Any]] = {}
        self.foreign_stream_launches: list[str] = []
        self.hook_launches = 0
        self.expected_stream: int | None = None
        self.installed: list[tuple[type, str, Any]] = []
        self._hook = None
        self.current_call: list[tuple[str, tuple[int, ...]]] | None = None
        self.call_signatures: Counter[tuple] = Counter()

    # -- per-call signatures (what the judge holds timed calls against) -------------------------
    def begin_call(self) -> None:
        self.current_call = []

    def end_call(self) -> tuple:
        """The (kernel name, grid) launches of the call that just ended, as a sorted tuple; counted."""
        signature = tuple(sorted(self.current_call or []))
        self.current_call = None
        self.call_signatures[signature] += 1
        return signature

    # -- installation --------------------------------------------------------------
    def install(self) -> None:
        import triton.runtime.jit as jit

        classes: list[type] = [jit.JITFunction]
        try:
            from triton.runtime.interpreter import InterpretedFunction

            classes.append(InterpretedFunction)
        except Exception:
            pass
        for cls in classes:
            original = cls.__dict__.get("run")
            if original is None:
                continue
            wrapper = self._make_wrapper(original)
            setattr(cls, "run", wrapper)
            self.installed.append((cls, "run", wrapper))
        self._install_hook()

    def _install_hook(self) -> None:
        try:
            from triton import knobs
        except Exception:
            return
        counter = self

        def on_launch(metadata) -> None:
            if not counter.counting:
                return
            counter.hook_launches += 1
            data = metadata if isinstance(metadata, dict) else (metadata.get() if metadata is not None else {})
            stream = data.get("stream") if isinstance(data, dict) else None
            if counter.expected_stream is not None and stream is not None and int(stream) != counter.expected_stream:
                counter.foreign_stream_launches.append(str(data.get("name")))

        chain = knobs.runtime.launch_enter_hook
        if hasattr(chain, "add"):  # triton >= 3.5: HookChain
            chain.add(on_launch)
        else:  # older knobs: a single optional callable
            previous = chain

            def chained(metadata):
                if previous is not None:
                    previous(metadata)
                on_launch(metadata)

            knobs.runtime.launch_enter_hook = chained  # pyright: ignore[reportAttributeAccessIssue]  # (older Triton's type)
        self._hook = on_launch

    def hook_installed(self) -> bool:
        if self._hook is None:
            return True
        from triton import knobs

        chain = knobs.runtime.launch_enter_hook
        calls = getattr(chain, "calls", None)
        return self._hook in calls if calls is not None else chain is not None

    def wrappers_installed(self) -> bool:
        return all(cls.__dict__.get(name) is wrapper for cls, name, wrapper in self.installed)

    def _make_wrapper(self, original):
        counter = self

        def run(fn_self, *args, grid=None, warmup=False, **kwargs):
            recorder = counter.recorder
            if recorder is not None:
                recorder.paused += 1
            try:
                kernel = original(fn_self, *args, grid=grid, warmup=warmup, **kwargs)
            finally:
                if recorder is not None:
                    recorder.paused -= 1
            if counter.counting and not warmup:
                counter._record(fn_self, kernel, args, grid, kwargs)
            return kernel

        run.__egg_wrapper__ = True  # type: ignore[attr-defined]
        return run

    @staticmethod
    def _grid(fn, args, grid: Any, kwargs) -> tuple[int, ...] | None:
        try:
            if callable(grid):
                meta = dict(zip(getattr(fn, "arg_names", []), args))
                meta.update(kwargs)
                grid = grid(meta)
            if grid is not None:
                return tuple(int(g) for g in tuple(grid))
        except Exception:
            pass
        return None

    def _record(self, fn, kernel, args, grid, kwargs) -> None:
        name = getattr(fn, "__name__", None) or getattr(getattr(fn, "fn", None), "__name__", "kernel")
        self.launches[name] += 1
        if self.current_call is not None or name not in self.info:
            grid = self._grid(fn, args, grid, kwargs)
        if self.current_call is not None:
            self.current_call.append((name, grid or ()))
        if name in self.info:
            return
        info: dict[str, Any] = {"name": name}
        if grid is not None:
            info["grid"] = list(grid)
        metadata = getattr(kernel, "metadata", None)
        if metadata is not None:
            for key, field in (("num_warps", "num_warps"), ("num_stages", "num_stages"), ("shared",
                                                                                          "shared_mem_bytes")):
                value = getattr(metadata, key, None)
                if value is not None:
                    info[field] = int(value)
        else:
            for key in ("num_warps", "num_stages"):
                if key in kwargs:
                    info[key] = kwargs[key]
        for key, field in (("n_regs", "registers"), ("n_spills", "spills")):
            try:
                value = getattr(kernel, key, None)
                if value is not None:
                    info[field] = int(value)
            except Exception:
                pass
        constexprs = {}
        for name_, value in kwargs.items():
            if isinstance(value, (int, float, bool, str)) and name_ not in ("num_warps", "num_stages", "num_ctas"):
                constexprs[name_] = value
        info["constexprs"] = constexprs
        self.info[name] = info

    def reset(self) -> None:
        self.launches.clear()
        self.call_signatures.clear()
        self.hook_launches = 0
        self.foreign_stream_launches.clear()

    def total(self) -> int:
        return sum(self.launches.values())


# ---------------------------------------------------------------------------- monkeypatching

def _watched_namespaces() -> list[tuple[str, Any]]:
    import time

    import triton

    spaces: list[tuple[str, Any]] = [
        ("torch", torch), ("torch.Tensor", torch.Tensor), ("torch.nn.Module", torch.nn.Module),
        ("torch.nn.functional", torch.nn.functional), ("torch.cuda", torch.cuda), ("torch._C", torch._C),
        ("torch.testing", torch.testing), ("torch.utils.deterministic", sys.modules.get("torch.utils.deterministic")),
        ("time", time), ("threading", threading), ("triton", triton),
    ]
    for name in ("triton.testing", "triton.runtime.jit", "triton.runtime.interpreter", "triton.knobs",
                 "torch.cuda.graphs", "egg_mcp.evaluation.harness", "egg_mcp.evaluation.compare",
                 "egg_mcp.evaluation.integrity", "egg_mcp.evaluation.timing", "egg_mcp.evaluation.worker",
                 "egg_mcp.evaluation.candidate_side", "egg_mcp.evaluation.wire", "egg_mcp.evaluation.guard"):
        module = sys.modules.get(name)
        if module is not None:
            spaces.append((name, module))
    for cls_path in ("torch.cuda.Event", "torch.cuda.Stream", "torch.cuda.CUDAGraph"):
        obj = getattr(torch.cuda, cls_path.rsplit(".", 1)[1], None)
        if isinstance(obj, type):
            spaces.append((cls_path, obj))
    return [(n, s) for n, s in spaces if s is not None]


def _interesting(value: Any) -> bool:
    return callable(value) or isinstance(value, (types.ModuleType, type))


class AttributeSnapshot:
    """Identity of every callable/class/module attribute of the watched namespaces."""

    def __init__(self):
        self.entries: dict[tuple[str, str], int] = {}
        self.spaces = _watched_namespaces()
        for space_name, space in self.spaces:
            for attr, value in list(vars(space).items()):
                if _interesting(value):
                    self.entries[(space_name, attr)] = id(value)
        self.trace = sys.gettrace()
        self.profile = sys.getprofile()
        self.refs = {key: value for key, value in self._values().items()}  # keep objects alive: ids stay unique

    def _values(self) -> dict[tuple[str, str], Any]:
        out = {}
        for space_name, space in self.spaces:
            d = vars(space)
            for attr, value in list(d.items()):
                if (space_name, attr) in self.entries:
                    out[(space_name, attr)] = value
        return out

    def changed(self) -> list[str]:
        """Names whose object changed or vanished since the snapshot (plus trace/profile hooks)."""
        current = {space_name: vars(space) for space_name, space in self.spaces}
        out = []
        for (space_name, attr), ident in self.entries.items():
            value = current[space_name].get(attr, _MISSING)
            if value is _MISSING or (id(value) != ident and not _library_wrapper(value, self.refs[(space_name, attr)])):
                out.append(f"{space_name}.{attr}")
        if sys.gettrace() is not self.trace:
            out.append("sys.settrace")
        if sys.getprofile() is not self.profile:
            out.append("sys.setprofile")
        return out


_MISSING = object()
_LIBRARY_DIRS = tuple(
    os.path.dirname(m.__file__) + os.sep for m in (torch,) if m.__file__
)


def _library_wrapper(value: Any, original: Any) -> bool:
    """torch rebinds a few functions when a submodule is imported lazily (torch._dynamo wraps
    torch.manual_seed with `_disable_dynamo`): a wrapper whose code lives in torch itself and whose
    __wrapped__ chain reaches the original object is not candidate monkeypatching."""
    code = getattr(value, "__code__", None)
    if code is None or not code.co_filename.startswith(_LIBRARY_DIRS):
        return False
    seen = 0
    while value is not None and seen < 8:
        if value is original:
            return True
        value = getattr(value, "__wrapped__", None)
        seen += 1
    return False


def new_live_threads(before: set[int | None]) -> list[str]:
    """Threads started since `before` (a set of idents) that are still alive."""
    return [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
