"""One-off probe of the GPU machine: versions, Triton launch-hook API, compiled metadata fields.

Usage: python benchmarks/probe_device.py OUT_DIR
"""
import json
import os
import sys

import torch
import triton
import triton.language as tl

out = sys.argv[1]
info = {"torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0)}
p = torch.cuda.get_device_properties(0)
info["props"] = {k: getattr(p, k) for k in dir(p) if not k.startswith("_") and isinstance(getattr(p, k), (int, float, str))}
info["knobs_runtime"] = [a for a in dir(getattr(getattr(triton, "knobs", None), "runtime", None)) if not a.startswith("_")] if hasattr(triton, "knobs") else None
seen = []


@triton.jit
def add_kernel(x, y, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(y + o, tl.load(x + o, mask=o < n) + 1, mask=o < n)


def hook(*args, **kwargs):
    md = args[0] if args else None
    seen.append({"type": type(md).__name__, "attrs": [a for a in dir(md) if not a.startswith("_")][:80],
                 "name": getattr(md, "name", None), "kwargs": list(kwargs)})

try:
    triton.knobs.runtime.launch_enter_hook = hook
except Exception as exc:
    info["hook_error"] = repr(exc)
x = torch.randn(1 << 20, device="cuda")
y = torch.empty_like(x)
k = add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), B=1024)
torch.cuda.synchronize()
info["hook_calls"] = seen[:2]
try:
    info["compiled_metadata"] = {a: repr(getattr(k.metadata, a))[:80] for a in dir(k.metadata) if not a.startswith("_")}
    info["compiled_attrs"] = [a for a in dir(k) if not a.startswith("_")]
    info["n_regs"], info["n_spills"] = k.n_regs, k.n_spills
except Exception as exc:
    info["metadata_error"] = repr(exc)
try:
    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    info["nvml"] = {"name": pynvml.nvmlDeviceGetName(h), "sm_clock": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                    "max_sm_clock": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
                    "throttle": pynvml.nvmlDeviceGetCurrentClocksEventReasons(h),
                    "driver": pynvml.nvmlSystemGetDriverVersion()}
except Exception as exc:
    info["nvml_error"] = repr(exc)
json.dump(info, open(os.path.join(out, "probe.json"), "w"), indent=1, default=str)
print(json.dumps({k: info[k] for k in ("torch", "triton", "device", "knobs_runtime", "hook_calls") if k in info}, default=str)[:3000])
