"""Tunables spelled BM/BN/BK (or any power-of-two UPPERCASE constexpr passed at the launch), persistent
grids' program counts, and tied predictions (CPU, ast + cost model only)."""

from __future__ import annotations

import asyncio

from egg_mcp.contract import EvalOptions
from egg_mcp.hardware import GPU_TABLE
from egg_mcp.tiling.dims import normalize_dims
from egg_mcp.tiling.model import estimate
from egg_mcp.tiling.plan import tie_note
from egg_mcp.tiling.rewrite import apply_config
from egg_mcp.tiling.search import propose_tiling
from egg_mcp.tiling.space import extract_space, persistent_programs
from tests.conftest import REPO

H200 = GPU_TABLE["H200"]

SHORT_NAMES = '''import triton
import triton.language as tl

BM = 128
BN = 128


@triton.jit
def mm(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, CHUNK: tl.constexpr):
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc += tl.dot(tl.load(a), tl.load(b), input_precision="ieee")


def run(a, b, c, M, N, K):
    mm[(triton.cdiv(M, BM) * triton.cdiv(N, BN),)](a, b, c, M, N, K, BM=BM, BN=BN, BK=32, CHUNK=64, num_warps=4)
'''


class NoGpu:
    def has_gpu(self) -> bool:
        return False


def test_bm_bn_bk_at_the_launch_are_found_with_their_axes():
    dims = normalize_dims("gemm", {"M": 4096, "N": 4096, "K": 4096})
    space = extract_space(SHORT_NAMES, kind="gemm", dims=dims)
    params = {p.name: p for p in space.params}
    assert {"BM", "BN", "BK", "CHUNK", "num_warps"} <= set(params)
    assert (params["BM"].role, params["BM"].axis) == ("block", "M")
    assert (params["BN"].axis, params["BK"].axis) == ("N", "K")
    assert len(params["BK"].choices) > 1 and params["BK"].current == 32
    # an UPPERCASE power-of-two constexpr at the launch is tuned as a block size
    assert params["CHUNK"].role == "block" and len(params["CHUNK"].choices) > 1
    rewritten = apply_config(SHORT_NAMES, {"BM": 64, "BK": 64})
    assert "BM = 64" in rewritten and "BK=64" in rewritten


def test_propose_tiling_works_on_bm_bn_bk_without_rewriting_the_kernel():
    proposal = asyncio.run(propose_tiling(NoGpu(), reference_source="", candidate_source=SHORT_NAMES,
                                          options=EvalOptions(), gpu=H200, dims={"M": 4096, "N": 4096, "K": 4096},
                                          kind="gemm"))
    assert proposal.feasible_count > 0 and proposal.recommended is not None
    assert {"BM", "BN", "BK"} <= set(proposal.recommended.values)


def test_persistent_grid_program_count_is_used():
    src = (REPO / "egg_mcp" / "e2e" / "demo_kernels" / "softmax" / "mapping_persistent_rows.py").read_text()
    dims = normalize_dims("softmax", {"n_rows": 4096, "n_cols": 8192})
    space = extract_space(src, kind="softmax", dims=dims)
    assert persistent_programs(space, H200.sm_count) == 4 * H200.sm_count  # PROGRAMS_PER_SM = 4
    values = {p.name: p.current for p in space.params}
    est = estimate(values, space, gpu=H200, dims=dims, kind="softmax")  # pyright: ignore[reportArgumentType]  # (each has its current value)
    assert est.grid == [4 * H200.sm_count]
    assert any(n.startswith("persistent grid: 528 programs") for n in est.notes)
    # a non-persistent kernel keeps one program per tile
    plain = extract_space((REPO / "tests" / "fixtures" / "softmax" / "online_blocked.py").read_text(),
                          kind="softmax", dims=dims)
    assert persistent_programs(plain, H200.sm_count) is None


def test_tied_predictions_are_called_ties():
    note = tie_note([0.0670, 0.0671, 0.0672, None])
    assert note and "cannot tell them apart" in note and "3 predictions" in note
    assert tie_note([0.05, 0.08]) is None
    assert tie_note([0.05]) is None
