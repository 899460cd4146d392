"""Give a process's cached CUDA blocks back between the steps of a large verify.

The judge and its runner share one GPU and run at the same time (the judge computes a trial's reference while the
runner runs the candidate). PyTorch's caching allocator keeps every freed block reserved for its own process, so at
large sizes each process held its peak for the whole job: a softmax over a 6 GiB input ran out of memory on the
140 GB H200 with the runner holding 54.7 GiB (benchmarks/results/h200_2026-12-02/verify_sizes_0b272d0.json).
Released only when a step left at least RELEASE_ABOVE_BYTES cached (small problems keep their warm cache) and the
card is short of room for the other process (KEEP_WHILE_FREE): giving blocks back to the driver and taking them again
next trial is not free either.
"""

from __future__ import annotations

import contextlib

import torch

RELEASE_ABOVE_BYTES = 1 << 30
KEEP_WHILE_FREE = 2.0
"""A process keeps its cached blocks while the card's free memory is at least this many times what it holds cached:
the other process (the judge beside its runner) can then still allocate all that this one would give back, twice.
Released after every step regardless, a 6 GiB softmax's correctness trials cost 0.27 s each beyond their GPU work
on the H200 (0.09 s at 2 GiB), memory given back and mapped again every trial
(benchmarks/results/h200_2026-12-03/README.md)."""

# Trusted references, taken before any candidate code is imported (the runner imports this module first).
_initialized = torch.cuda.is_initialized
_reserved = torch.cuda.memory_reserved
_allocated = torch.cuda.memory_allocated
_empty_cache = torch.cuda.empty_cache
_mem_get_info = torch.cuda.mem_get_info


def _free_bytes() -> int:
    """The card's free memory (every process's use counted); 0 when the driver cannot say (then release)."""
    try:
        return int(_mem_get_info()[0])
    except Exception:  # noqa: BLE001
        return 0


def release_cached(min_bytes: int = RELEASE_ABOVE_BYTES, *, force: bool = False) -> int:
    """Return the cached, unused CUDA blocks to the driver when they add up to min_bytes and the card lacks room
    for the other process (KEEP_WHILE_FREE; `force`: regardless, after an out-of-memory error); the bytes given
    back."""
    if not _initialized():
        return 0
    cached = _reserved() - _allocated()
    if cached < min_bytes or (not force and _free_bytes() >= KEEP_WHILE_FREE * cached):
        return 0
    _empty_cache()
    return cached


JUDGE_ALLOCATOR = "expandable_segments:True"
"""The judge's CUDA allocator grows one mapping instead of caching fixed segments, so its large blocks (6 GiB
reference outputs) and small ones (the comparison's chunks) can share memory. Every H200 measurement of the GPU
region rule (benchmarks/results/h200_2026-12-03/) ran with it; the judge's reserved peak there was within 0.3 GiB of
its allocated peak. Not measured without it since the reference-cycle fix."""


def use_judge_allocator() -> None:
    """Before the judge's first CUDA allocation: the allocator setting above (an older torch or a build without
    CUDA keeps its default; a judge on the interpreter never allocates CUDA memory)."""
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None) or torch.cuda.memory._set_allocator_settings
    with contextlib.suppress(Exception):
        setter(JUDGE_ALLOCATOR)


def phase_peaks_gib() -> dict[str, float]:
    """The peaks since the last call (GiB): reserved (what the card lost to this process) and allocated (live
    tensors; the gap is the allocator's cache and fragmentation). Resets them for the next phase."""
    peaks = {"gpu_peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 1),
             "gpu_peak_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1)}
    torch.cuda.reset_peak_memory_stats()
    return peaks


def release_all() -> None:
    """Between jobs: collect reference cycles first (tensors in a cycle stay allocated until a collection: a full
    size reference timing's input sets reached the next job and ran its audit out of memory on the H200), then give
    every cached block back."""
    import gc

    gc.collect()
    if _initialized():
        _empty_cache()
