"""Large trial outputs through one shared memory region instead of the socket.

A 6 GiB output sent as bytes costs a pinned allocation and a copy in the runner, a socket transfer, a fresh
6 GiB buffer and a pageable copy to the GPU in the judge: ~5.8 s per trial on the H200 host, seven times per
verify (`benchmarks/results/h200_2026-12-02/verify_softmax_full_e790047.log`). Instead, the judge makes one
memfd per job, sized to the reference's outputs, and hands its descriptor to the runner once (`send_fds`, judge
to runner only: the judge never accepts a descriptor). The runner copies each output leaf straight into it (from
the GPU, a DMA copy into page-locked memory) and sends only the leaf's offset; the judge validates every
range and takes its own copy (to the GPU, or a host clone) before comparing, so what the runner's threads write
into the region afterwards can change nothing the judge reads. Small outputs keep the socket.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from typing import Any

ALIGN = 4096


def aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class OutputExchange:
    """One shared memory region (a memfd) mapped by the judge, or by the runner from the judge's descriptor."""

    def __init__(self, nbytes: int, fd: int | None = None):
        self.size = aligned(max(int(nbytes), 1))
        if fd is None:
            fd = os.memfd_create("egg-outputs", os.MFD_CLOEXEC)
            os.ftruncate(fd, self.size)
        elif os.fstat(fd).st_size < self.size:
            os.close(fd)
            raise ValueError(f"the shared output region is smaller than the {self.size} bytes announced")
        self.fd = fd
        self.map = mmap.mmap(fd, self.size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        self._registered = False
        self._base: Any = None

    def register_for_gpu(self) -> bool:
        """Page-lock the region for the CUDA driver (copies at DMA rate); pageable copies when that fails."""
        import torch

        if self._registered or not torch.cuda.is_available():
            return self._registered
        try:
            ptr = self.base().data_ptr()
            self._registered = int(torch.cuda.cudart().cudaHostRegister(ptr, self.size, 0)) == 0
        except Exception:  # noqa: BLE001 - a pageable copy is slower, never wrong
            self._registered = False
        return self._registered

    def base(self):
        """The whole region as one uint8 host tensor (no copy)."""
        import torch

        if self._base is None:
            self._base = torch.frombuffer(self.map, dtype=torch.uint8)
        return self._base

    def view(self, offset: int, nbytes: int, dtype, shape: list[int]):
        """Bytes [offset, offset + nbytes) as a tensor of `dtype` and `shape` (no copy)."""
        return self.base()[offset:offset + nbytes].view(dtype).reshape(shape)

    def close(self) -> None:
        import torch

        if self._registered:
            with contextlib.suppress(Exception):
                torch.cuda.cudart().cudaHostUnregister(self.base().data_ptr())
            self._registered = False
        self._base = None
        with contextlib.suppress(BufferError, ValueError):  # a view still alive keeps the mapping; the fd goes
            self.map.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)


class Placer:
    """Runner side: where the next output leaf goes in the region (None when it does not fit: the socket)."""

    def __init__(self, exchange: OutputExchange | None):
        self.exchange = exchange
        self.used = 0

    def place(self, t) -> int | None:
        """Copy host-or-device tensor `t` into the region; its offset, or None if it does not fit."""
        if self.exchange is None:
            return None
        nbytes = t.numel() * t.element_size()
        if nbytes == 0 or self.used + nbytes > self.exchange.size:
            return None
        at = self.used
        self.exchange.view(at, nbytes, t.dtype, list(t.shape)).copy_(t)
        self.used = aligned(at + nbytes)
        return at


class Ranges:
    """Judge side: every leaf's byte range must lie inside the region and overlap no other leaf's."""

    def __init__(self, size: int):
        self.size = size
        self.taken: list[tuple[int, int]] = []

    def claim(self, at: Any, nbytes: int) -> str | None:
        if not isinstance(at, int) or isinstance(at, bool) or at < 0 or at + nbytes > self.size:
            return f"offset {at!r} with {nbytes} bytes is outside the {self.size}-byte shared region"
        if any(at < end and start < at + nbytes for start, end in self.taken):
            return f"bytes [{at}, {at + nbytes}) overlap another output's in the shared region"
        self.taken.append((at, at + nbytes))
        return None
