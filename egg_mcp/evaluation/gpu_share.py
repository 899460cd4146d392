"""GPU memory the judge shares with its runner by a file descriptor (CUDA VMM, driver API through ctypes).

A region made with cuMemCreate and exported as a POSIX file descriptor can be imported and mapped by another
process without the legacy IPC's shared PID namespace: on the H200 a runner in its own user and PID namespaces,
Landlock-confined, mapped a 6 GiB region in 1 ms and the judge copied it out in 3.6 ms
(`benchmarks/probe_gpu_share.py`, `benchmarks/results/h200_2026-12-02/probe_gpu_share_02797b5.log`). exchange.py
uses it for large trial outputs, so they never leave the GPU.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

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


def _call(name: str, *args) -> None:
    rc = getattr(ctypes.CDLL("libcuda.so.1"), name)(*args)  # torch loaded it: no file is opened
    if rc != 0:
        raise OSError(f"{name} returned CUresult {rc}")


def _prop(device: int) -> _Prop:
    prop = _Prop()
    prop.type, prop.requestedHandleTypes = PINNED, POSIX_FD
    prop.location = _Location(ON_DEVICE, device)
    return prop


def granularity(device: int) -> int:
    out = ctypes.c_size_t()
    _call("cuMemGetAllocationGranularity", ctypes.byref(out), ctypes.byref(_prop(device)), ctypes.c_int(0))
    return int(out.value)


class SharedGpuRegion:
    """`size` bytes of device memory, made here (`fd` None: exportable) or imported from a peer's descriptor."""

    def __init__(self, size: int, device: int, fd: int | None = None):
        self.size, self.device = size, device
        self.handle = ctypes.c_ulonglong()
        self.ptr = ctypes.c_ulonglong()
        self._mapped = False
        if fd is None:
            _call("cuMemCreate", ctypes.byref(self.handle), ctypes.c_size_t(size), ctypes.byref(_prop(device)),
                  ctypes.c_ulonglong(0))
            out = ctypes.c_int()
            try:
                _call("cuMemExportToShareableHandle", ctypes.byref(out), self.handle, ctypes.c_int(POSIX_FD),
                      ctypes.c_ulonglong(0))
            except OSError:
                _call("cuMemRelease", self.handle)
                raise
            self.fd = out.value
        else:
            self.fd = fd
            _call("cuMemImportFromShareableHandle", ctypes.byref(self.handle), ctypes.c_void_p(fd),
                  ctypes.c_int(POSIX_FD))
        try:
            _call("cuMemAddressReserve", ctypes.byref(self.ptr), ctypes.c_size_t(size), ctypes.c_size_t(0),
                  ctypes.c_ulonglong(0), ctypes.c_ulonglong(0))
            _call("cuMemMap", self.ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), self.handle, ctypes.c_ulonglong(0))
            self._mapped = True
            access = _Access(_Location(ON_DEVICE, device), READ_WRITE)
            _call("cuMemSetAccess", self.ptr, ctypes.c_size_t(size), ctypes.byref(access), ctypes.c_size_t(1))
        except OSError:
            self.close()
            raise

    def bytes_tensor(self):
        """The region as one uint8 CUDA tensor (no copy; valid until close)."""
        import torch

        region = self

        class _Interface:
            __cuda_array_interface__ = {"shape": (region.size,), "typestr": "|u1", "data": (region.ptr.value, False),
                                        "version": 3}
        return torch.as_tensor(_Interface(), device=f"cuda:{self.device}")

    def close(self) -> None:
        """Unmap and release (the peer's mapping keeps the memory until it unmaps or exits)."""
        with contextlib.suppress(OSError):
            if self._mapped:
                _call("cuMemUnmap", self.ptr, ctypes.c_size_t(self.size))
                self._mapped = False
            if self.ptr.value:
                _call("cuMemAddressFree", self.ptr, ctypes.c_size_t(self.size))
                self.ptr = ctypes.c_ulonglong()
            if self.handle.value:
                _call("cuMemRelease", self.handle)
                self.handle = ctypes.c_ulonglong()
        with contextlib.suppress(OSError):
            os.close(self.fd)
