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
import time
from typing import Any, Callable

ALIGN = 4096


def aligned(n: int, step: int = ALIGN) -> int:
    """n rounded up to a multiple of `step`."""
    return (n + step - 1) // step * step


class OutputExchange:
    """One shared memory region (a memfd) mapped by the judge, or by the runner from the judge's descriptor."""

    on_device = False

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
            cudart = torch.cuda.cudart()
            assert cudart is not None  # CUDA is available (checked above)
            self._registered = int(cudart.cudaHostRegister(ptr, self.size, 0)) == 0
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
                cudart = torch.cuda.cudart()
                assert cudart is not None  # registered, so CUDA is available
                cudart.cudaHostUnregister(self.base().data_ptr())
            self._registered = False
        self._base = None
        with contextlib.suppress(BufferError, ValueError):  # a view still alive keeps the mapping; the fd goes
            self.map.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)


class DeviceExchange:
    """The same region on the GPU (gpu_share.py): outputs never leave the device. The judge makes it (`fd` None)
    and sends its descriptor; the runner imports it. Made per job (33 ms at 6 GiB), never kept: it holds GPU memory."""

    on_device = True

    def __init__(self, nbytes: int, device: int, fd: int | None = None):
        from egg_mcp.evaluation.gpu_share import SharedGpuRegion, granularity

        step = granularity(device)
        self.size = aligned(max(int(nbytes), 1), step)
        if fd is not None and nbytes != self.size:
            os.close(fd)
            raise ValueError(f"a shared GPU region of {nbytes} bytes is not a multiple of the {step}-byte granularity")
        self.region = SharedGpuRegion(self.size, device, fd)
        self.fd = self.region.fd
        self._base: Any = None

    def base(self):
        if self._base is None:
            self._base = self.region.bytes_tensor()
        return self._base

    def view(self, offset: int, nbytes: int, dtype, shape: list[int]):
        return self.base()[offset:offset + nbytes].view(dtype).reshape(shape)

    def close(self) -> None:
        import torch

        torch.cuda.synchronize()  # no copy still reading it
        self._base = None
        self.region.close()


class Placer:
    """Runner side: where the next output leaf goes in the region (None when it does not fit: the socket)."""

    def __init__(self, exchange: OutputExchange | DeviceExchange | None):
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
        if getattr(self.exchange, "on_device", False):
            import torch

            torch.cuda.synchronize()  # written before the judge is told where: it reads on its own stream
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


GPU_PEAK_PER_OUTPUT_BYTE = 10
"""What the judge and the runner held on the GPU together at their peak per byte of output, at level1/23 softmax's full
size on the H200 (6 GiB out, GPU region forced): the runner 37.6 GiB, the judge 13.7 GiB beside the 6 GiB region
(nvidia-smi; the judge's own peak 12.7 GiB reserved), so 8.6, rounded up to 10 for the prestarted runners and the
allocator (benchmarks/results/h200_2026-12-03/verify_sizes_forced_a4be528.json). It was 24 while the judge kept
every output in a reference cycle until the garbage collector ran (60-90 GiB at that size). A GPU region adds one
byte per output byte for the whole job, so a region goes on the GPU only where (10 + 1) x the outputs fit."""


def _too_big_for_gpu(total: int) -> str | None:
    """Why a GPU region of `total` bytes is not used on this device (None: it fits)."""
    import torch

    try:
        capacity = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    except Exception as exc:  # noqa: BLE001 - no device to ask: no GPU region
        return f"not made: {exc}"[:200]
    from egg_mcp.config import exchange_gpu_peak_per_byte

    peak = exchange_gpu_peak_per_byte(GPU_PEAK_PER_OUTPUT_BYTE)
    if (peak + 1) * total <= capacity:
        return None
    return (f"not used: {total / 2**30:.1f} GiB of outputs x {peak + 1:g} (the peak per output byte "
            f"measured on the H200, plus the region) is over this GPU's {capacity / 2**30:.1f} GiB")


def offer_region(ask: Callable[[dict[str, Any], int], dict[str, Any]], total: int, on_gpu: bool,
                 held: OutputExchange | None) -> tuple[Any, dict[str, Any]]:
    """The judge's side, once per job: (the region the runner mapped or None, what to say of it in judge_info).
    GPU memory when the runner can map it, else a page-locked host region; `held` is a persistent judge's host
    region, reused (making and page-locking 6 GiB took seconds). `ask(header, fd)` sends the `exchange` command."""
    import torch

    info: dict[str, Any] = {}
    too_big = on_gpu and _too_big_for_gpu(total)
    if too_big:
        info["device_region"] = too_big
    if on_gpu and not too_big:
        try:
            device = DeviceExchange(total, torch.cuda.current_device())
        except Exception as exc:  # noqa: BLE001 - no VMM here (driver, permissions): the host region
            info["device_region"] = f"not made: {exc}"[:200]
        else:
            reply = ask({"type": "exchange", "bytes": device.size, "where": "device"}, device.fd)
            if reply.get("ok") is True:
                return device, {"where": "device", "bytes": device.size, "runner_setup_s": reply.get("setup_s")}
            device.close()
            info["device_region"] = f"not mapped by the runner: {str(reply.get('error'))[:200]}"
    started = time.perf_counter()
    try:
        host = held if held is not None and held.size >= total else OutputExchange(total)
    except OSError as exc:  # no memfd here: the socket carries them, slower
        return None, {**info, "host_region": f"not used: {exc}"[:200]}
    registered = host.register_for_gpu() if on_gpu else False
    info.update({"where": "host", "bytes": host.size, "judge_pinned": registered, "kept": host is held,
                 "judge_setup_s": round(time.perf_counter() - started, 3)})
    reply = ask({"type": "exchange", "bytes": host.size, "where": "host"}, host.fd)
    return host, {**info, "runner_pinned": reply.get("registered") is True,
                  "runner_setup_s": reply.get("setup_s")}  # the runner's words
