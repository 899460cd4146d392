"""Softmax, MEMORY stage — the tuned persistent kernel with its loads pipelined and streamed.

Two changes on the committed tiling: the persistent loop is software-pipelined
(tl.range(..., num_stages=NUM_STAGES) issues the next tile's load while this one is reduced), and
x and y are touched once, so the load evicts first and the store bypasses L1 (.cs: streaming), to
keep L2 for the data still to come. The demo carries the committed tile constants into this file.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

NUM_WARPS = 8
PROGRAMS_PER_SM = 4  # resident programs per SM in the persistent grid
TARGET_TILE_ELEMENTS = 4096  # rows per tile = max(1, this // BLOCK_COLS): several rows only when rows are narrow
NUM_STAGES = 2  # tiles in flight per program: 2 doubles the registers held for x


@triton.jit
def softmax_persistent_pipelined_kernel(x_ptr, y_ptr, n_rows, n_cols, x_row_stride, y_row_stride,
                                        BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr,
                                        NUM_STAGES: tl.constexpr):
    """Each program loops over row tiles pid, pid + n_programs, ... with NUM_STAGES loads in flight.

    Args:
        x_ptr: input, [n_rows, n_cols], row-major.
        y_ptr: output, [n_rows, n_cols].
        BLOCK_ROWS: rows per tile (power of two).
        BLOCK_COLS: power of two >= n_cols.
        NUM_STAGES: software-pipelining depth of the tile loop.
    """
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    n_tiles = tl.cdiv(n_rows, BLOCK_ROWS)
    tile_rows = tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_COLS)
    col_mask = cols < n_cols
    for tile in tl.range(pid, n_tiles, n_programs, num_stages=NUM_STAGES):
        rows = (tile * BLOCK_ROWS + tile_rows).to(tl.int64)
        mask = (rows < n_rows)[:, None] & col_mask[None, :]
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=-float("inf"),
                    eviction_policy="evict_first")
        x = x.to(tl.float32)
        num = tl.exp2((x - tl.max(x, axis=1)[:, None]) * 1.4426950408889634)  # log2(e)
        inv_sum = 1.0 / tl.sum(num, axis=1)
        y = num * inv_sum[:, None]
        tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask,
                 cache_modifier=".cs")


def _sm_count(device: torch.device) -> int:
    # the CPU interpreter has no SMs: one program then walks every tile
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [n_rows, n_cols] -> softmax over dim 1."""
        x = x.contiguous()
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        block_cols = triton.next_power_of_2(n_cols)
        block_rows = min(triton.next_power_of_2(n_rows), max(1, TARGET_TILE_ELEMENTS // block_cols))
        n_tiles = triton.cdiv(n_rows, block_rows)
        grid = (min(n_tiles, _sm_count(x.device) * PROGRAMS_PER_SM),)
        softmax_persistent_pipelined_kernel[grid](x, y, n_rows, n_cols, x.stride(0), y.stride(0),
                                                  BLOCK_ROWS=block_rows, BLOCK_COLS=block_cols,
                                                  NUM_STAGES=NUM_STAGES, num_warps=NUM_WARPS)
        return y
