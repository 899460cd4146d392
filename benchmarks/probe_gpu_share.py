"""Probe: can the judge share GPU memory with a sandboxed runner through a file descriptor?

What is left of a large verify's cost is two host copies per trial (runner GPU -> shared host region -> judge GPU:
0.47 s at 6 GiB, benchmarks/results/h200_2026-12-02/verify_sizes_d3f974b.json). A CUDA VMM allocation exported as
a POSIX file descriptor (cuMemCreate + cuMemExportToShareableHandle) can be imported by another process
(cuMemImportFromShareableHandle) without the legacy IPC's shared PID namespace. This probe makes one in the parent
(the judge's role), sends the descriptor over a socket pair (SCM_RIGHTS) to a child started the way runners are
(plain, then under the sandbox's namespace launcher and confined as a runner confines itself), and reports whether
the child could map it, read the parent's pattern, write its own that the parent then reads, and how long each
step and a device-to-device copy out of it took.

    python3 benchmarks/probe_gpu_share.py [--gib 1]     (GPU only; prints one JSON line per mode)
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POSIX_FD, PINNED, ON_DEVICE, READ_WRITE = 1, 1, 1, 3


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _Access(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


def _cuda():
    lib = ctypes.CDLL("libcuda.so.1")

    def call(name: str, *args) -> None:
        rc = getattr(lib, name)(*args)
        if rc != 0:
            raise RuntimeError(f"{name} returned CUresult {rc}")
    return call


def _prop(device: int) -> _Prop:
    prop = _Prop()
    prop.type, prop.requestedHandleTypes = PINNED, POSIX_FD
    prop.location = _Location(ON_DEVICE, device)
    return prop


def _map(call, handle: ctypes.c_ulonglong, size: int, device: int) -> int:
    ptr = ctypes.c_ulonglong()
    call("cuMemAddressReserve", ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0), ctypes.c_ulonglong(0),
         ctypes.c_ulonglong(0))
    call("cuMemMap", ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), handle, ctypes.c_ulonglong(0))
    access = _Access(_Location(ON_DEVICE, device), READ_WRITE)
    call("cuMemSetAccess", ptr, ctypes.c_size_t(size), ctypes.byref(access), ctypes.c_size_t(1))
    return ptr.value


def _tensor(ptr: int, n_floats: int):
    import torch

    class View:
        __cuda_array_interface__ = {"shape": (n_floats,), "typestr": "<f4", "data": (ptr, False), "version": 3}
    return torch.as_tensor(View(), device="cuda")


def child(fd_sock: int, n_floats: int, confine: bool) -> None:
    import torch

    sock = socket.socket(fileno=fd_sock)
    torch.empty(1, device="cuda")  # the primary context, current on this thread (as the runner's warm-up makes it)
    report: dict = {"pid": os.getpid()}
    if confine:
        from egg_mcp.evaluation import confinement

        private = Path(tempfile.mkdtemp(prefix="egg-probe-share-"))
        applied = confinement.confine(private)
        report["sandbox_level"] = applied.get("level")
    try:
        _, fds, _, _ = socket.recv_fds(sock, 16, 1)
        call, started = _cuda(), time.perf_counter()
        handle = ctypes.c_ulonglong()
        call("cuMemImportFromShareableHandle", ctypes.byref(handle), ctypes.c_void_p(fds[0]), ctypes.c_int(POSIX_FD))
        size = n_floats * 4
        view = _tensor(_map(call, handle, size, torch.cuda.current_device()), n_floats)
        report["import_map_s"] = round(time.perf_counter() - started, 4)
        report["read_parent_pattern"] = bool((view[:1024] == 7.0).all())
        view.fill_(11.0)
        torch.cuda.synchronize()
        report["ok"] = True
    except Exception as exc:  # noqa: BLE001 - the probe reports what failed
        report.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
    sock.sendall(json.dumps(report).encode())
    sock.close()


def parent(gib: float) -> None:
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from egg_mcp.evaluation import confinement
    from egg_mcp.evaluation.runner_process import NAMESPACES_ARG

    torch.empty(1, device="cuda")
    call, device = _cuda(), torch.cuda.current_device()
    prop = _prop(device)
    granularity = ctypes.c_size_t()
    call("cuMemGetAllocationGranularity", ctypes.byref(granularity), ctypes.byref(prop), ctypes.c_int(0))
    size = (int(gib * (1 << 30)) + granularity.value - 1) // granularity.value * granularity.value
    n = size // 4
    for mode in ("plain", "namespaces+confined"):
        row: dict = {"mode": mode, "bytes": size}
        started = time.perf_counter()
        handle, fd = ctypes.c_ulonglong(), ctypes.c_int()
        call("cuMemCreate", ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop), ctypes.c_ulonglong(0))
        call("cuMemExportToShareableHandle", ctypes.byref(fd), handle, ctypes.c_int(POSIX_FD), ctypes.c_ulonglong(0))
        view = _tensor(_map(call, handle, size, device), n)
        view.fill_(7.0)
        torch.cuda.synchronize()
        row["create_export_map_s"] = round(time.perf_counter() - started, 4)
        ours, theirs = socket.socketpair()
        prefix = confinement.spawn_prefix(NAMESPACES_ARG) if mode != "plain" else []
        row["launcher"] = bool(prefix)
        argv = [*prefix, sys.executable, __file__, "--child", str(theirs.fileno()), str(n),
                "1" if mode != "plain" else "0"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        proc = subprocess.Popen(argv, pass_fds=(theirs.fileno(),), env=env)
        theirs.close()
        socket.send_fds(ours, [b"x"], [fd.value])
        data = b""
        while chunk := ours.recv(65536):
            data += chunk
        proc.wait(timeout=120)
        row["child"] = json.loads(data or b"{}")
        row["parent_reads_child_pattern"] = bool((view[:1024] == 11.0).all()) if row["child"].get("ok") else False
        copy = torch.empty(n, device="cuda")
        torch.cuda.synchronize()
        started = time.perf_counter()
        copy.copy_(view)
        torch.cuda.synchronize()
        row["copy_out_s"] = round(time.perf_counter() - started, 4)
        print(json.dumps(row), flush=True)
        del copy, view
        os.close(fd.value)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1")
    else:
        parent(float(sys.argv[sys.argv.index("--gib") + 1]) if "--gib" in sys.argv else 1.0)
