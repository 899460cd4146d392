"""Launch geometry (issue 30): what propose_tiling reads from a candidate's grid (which block tiles which dimension,
how many programs each kernel launches at a config it tries, persistent and split-K grids, several kernels),
checked against the grids the same candidates launch when they run in the Triton interpreter (CPU)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys

import pytest

from egg_mcp.contract import EvalOptions
from egg_mcp.hardware import GPU_TABLE
from egg_mcp.tiling.dims import normalize_dims
from egg_mcp.tiling.kernel_calls import kernel_calls, launch_dims
from egg_mcp.tiling.launches import probe_launches
from egg_mcp.tiling.model import _estimate_one, call_view, estimate
from egg_mcp.tiling.rewrite import apply_config
from egg_mcp.tiling.search import propose_tiling
from egg_mcp.tiling.space import current_config, extract_space, persistent_programs
from tests.conftest import FIXTURES, REPO

H200 = GPU_TABLE["H200"].model_copy(deep=True)
GRIDS = FIXTURES / "grids"
REFERENCE = (GRIDS / "reference_matmul.py").read_text()
DIMS = {"M": 128, "N": 96, "K": 64}  # the reference's sizes
ROWSUM = ((GRIDS / "reference_rowsum.py").read_text(), "reduction", {"n_rows": 64, "n_cols": 300})
CPU_SMS = 4  # the SM count the fixtures launch with off the GPU (gemm_persistent's `_num_sms`)
GPU_AS_RUN = H200.model_copy(update={"sm_count": CPU_SMS})  # the GPU the interpreter's persistent grid was sized for
SHAPES = {  # fixture -> the configs tried beside the current one
    "gemm_2d": [{"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 16}, {"BLOCK_M": 128, "BLOCK_N": 64}],
    "gemm_flat": [{"BLOCK_M": 16, "BLOCK_N": 64, "GROUP_M": 4}, {"BLOCK_M": 128, "BLOCK_N": 64}],
    "gemm_persistent": [{"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 16}, {"BLOCK_M": 128, "BLOCK_N": 64}],
    "gemm_splitk_atomic": [{"BLOCK_M": 16, "BLOCK_N": 64, "SPLIT_K": 4}, {"BLOCK_M": 64, "SPLIT_K": 1}],
    "gemm_splitk_reduce": [{"BLOCK_M": 16, "BLOCK_N": 64, "REDUCE_BLOCK": 64}, {"SPLIT_K": 4, "REDUCE_BLOCK": 1024}],
    "rowsum_rows": [{"BLOCK_M": 1, "BLOCK_N": 128}, {"BLOCK_M": 16, "BLOCK_N": 32}],
}
TASKS = {"rowsum_rows": ROWSUM}  # the others compute REFERENCE, a GEMM of DIMS


def _task(shape: str) -> tuple[str, str, dict]:
    return TASKS.get(shape, (REFERENCE, "gemm", DIMS))


def _source(shape: str) -> str:
    return (GRIDS / f"{shape}.py").read_text()


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory):
    """shape -> [(config, launches [(kernel, grid)], max abs error)] for the current config and SHAPES' others,
    each run in the interpreter (one subprocess: TRITON_INTERPRET must not leak into this one)."""
    jobs = []
    for shape, others in SHAPES.items():
        current = current_config(extract_space(_source(shape)))
        for change in [{}] + others:
            config = {**current, **change}
            jobs.append((shape, config, {"reference": _task(shape)[0],
                                         "candidate": apply_config(_source(shape), config)}))
    folder = tmp_path_factory.mktemp("interpreted")
    (folder / "jobs.json").write_text(json.dumps([job for _, _, job in jobs]))
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, str(GRIDS / "interpret_launches.py"), str(folder / "jobs.json"),
                           str(folder / "out.json")], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out: dict[str, list] = {}
    for (shape, config, _), result in zip(jobs, json.loads((folder / "out.json").read_text())):
        launches = [(name, list(grid)) for name, grid in result["launches"]]
        out.setdefault(shape, []).append((config, launches, result["max_abs_error"]))
    return out


def _probe(source: str, sizes: dict | None = None, reference: str = REFERENCE) -> list[dict]:
    out = probe_launches({"reference_source": reference, "candidate_source": source, "dtype": "float32",
                          "size_overrides": sizes or {}})
    assert "error" not in out, out
    return out["launches"]


def _model_programs(source: str, launches: list[dict], config: dict, gpu=GPU_AS_RUN, dims=DIMS,
                    kind: str = "gemm") -> list[tuple]:
    """(kernel, programs) the model prices for each launch at `config`: the calls read from the probe of the
    source as written, as propose_tiling reads them."""
    dims = normalize_dims(kind, dims)
    space = extract_space(source, kind=kind, dims=dims)
    space.calls, _ = kernel_calls(space, kind, dims, launches)
    return [(call.kernel, math.prod(_estimate_one(config, call_view(space, call), gpu, call.dims, call.kind,
                                                  "float32").grid)) for call in space.calls]


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_probe_reads_the_grid_the_interpreter_launches(shape, interpreted):
    config, launches, error = interpreted[shape][0]
    assert error < 1e-3  # the fixture computes the task
    assert [(r["kernel"], r["grid"]) for r in _probe(_source(shape), reference=_task(shape)[0])] == launches


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_model_launches_the_programs_the_interpreter_does_at_every_config_tried(shape, interpreted):
    source = _source(shape)
    reference, kind, dims = _task(shape)
    launches = _probe(source, reference=reference)
    for config, truth, error in interpreted[shape]:
        assert error < 1e-3, (config, error)
        assert _model_programs(source, launches, config, dims=dims, kind=kind) == [
            (k, math.prod(g)) for k, g in truth], config


def test_a_persistent_grid_launches_its_own_programs_whatever_the_block_sizes(interpreted):
    """min(NUM_SMS, tiles) programs looping over the tiles: the count follows the SMs, not BLOCK_M x BLOCK_N."""
    counts = [math.prod(truth[0][1]) for _, truth, _ in interpreted["gemm_persistent"]]
    assert counts == [CPU_SMS, CPU_SMS, 2]  # 12 and 16 tiles on 4 SMs; 2 tiles at 128 x 64
    source = _source("gemm_persistent")
    sizes = {"M": 4096, "N": 4096, "K": 512}
    launches = _probe(source, sizes)
    for change in ({}, {"BLOCK_M": 128, "BLOCK_N": 128}, {"BLOCK_M": 16, "BLOCK_N": 32}):
        config = {**current_config(extract_space(source)), **change}
        assert _model_programs(source, launches, config, gpu=H200, dims=sizes) == [("matmul_persistent", 132)]


def test_a_persistent_grid_holds_one_program_per_sm():
    sizes = {"M": 4096, "N": 4096, "K": 512}
    source = _source("gemm_persistent")
    config = {**current_config(extract_space(source)), "BLOCK_M": 128, "BLOCK_N": 128}
    est = _estimate(source, _probe(source, sizes), config, sizes)
    assert any(n.startswith(f"persistent grid: {H200.sm_count} programs loop over 1024 tiles") for n in est.notes)
    assert est.waves <= 1 and not any(n.startswith("only") for n in est.notes)
    # one resident program per SM hides less latency than the same tiles launched one program each
    flat = _estimate(_source("gemm_flat"), _probe(_source("gemm_flat"), sizes), {**config, "GROUP_M": 1}, sizes)
    assert est.predicted_ms is not None and flat.predicted_ms is not None
    assert est.predicted_ms > flat.predicted_ms


def _estimate(source: str, launches: list[dict], config: dict, sizes: dict):
    dims = normalize_dims("gemm", sizes)
    space = extract_space(source, kind="gemm", dims=dims)
    space.calls, _ = kernel_calls(space, "gemm", dims, launches)
    return estimate(config, space, gpu=H200, dims=dims, kind="gemm")


def test_split_k_is_a_grid_dimension_of_its_own_not_a_tile_of_m_or_n():
    space = extract_space(_source("gemm_splitk_atomic"), kind="gemm", dims=normalize_dims("gemm", DIMS))
    split = space.param("SPLIT_K")
    assert (split.role, split.axis, split.choices) == ("split", None, [1, 2, 4])


def test_a_block_whose_name_says_nothing_gets_its_dimension_from_the_grid():
    """sum_partials' REDUCE_BLOCK: the grid shows cdiv(M x N, REDUCE_BLOCK) programs, so it tiles n; every value of
    it used to be priced at a default 1024-element block (the same prediction for all)."""
    sizes = {"M": 4096, "N": 4096, "K": 512}
    source = _source("gemm_splitk_reduce")
    launches = _probe(source, sizes)
    dims = normalize_dims("gemm", sizes)
    space = extract_space(source, kind="gemm", dims=dims)
    space.calls, notes = kernel_calls(space, "gemm", dims, launches)
    reduce = next(c for c in space.calls if c.kernel == "sum_partials")
    view = call_view(space, reduce)
    assert next(p for p in view.params if p.name == "REDUCE_BLOCK").axis == "n"
    config = current_config(space)
    times = {b: _estimate_one({**config, "REDUCE_BLOCK": b}, view, H200, reduce.dims, reduce.kind, "float32")
             for b in (64, 256, 1024)}
    assert [math.prod(e.grid) for e in times.values()] == [4096 * 4096 // b for b in (64, 256, 1024)]
    assert len({e.predicted_ms for e in times.values()}) == 3
    assert not any("REDUCE_BLOCK" in n for n in notes)


def test_a_grid_the_model_does_not_explain_is_said_in_the_proposal():
    """The split count renamed K_SLICES (a name the model does not read as a split): the launch has 2x the
    programs the model counts, and the proposal says so instead of ranking on the wrong count."""
    source = _source("gemm_splitk_atomic").replace("SPLIT_K", "K_SLICES").replace(', "K_SLICES": [1, 2, 4]', "")
    proposal = asyncio.run(propose_tiling(_NoGpu(), reference_source=REFERENCE, candidate_source=source,
                                          options=EvalOptions(), gpu=H200, dims=DIMS, kind="gemm",
                                          launches=_probe(source)))
    warning = next(w for w in proposal.warnings if "matmul_splitk" in w and "programs" in w)
    assert "24 programs" in warning and "grid [4, 3, 2]" in warning and "12" in warning


def test_a_persistent_grids_program_count_is_said_to_be_set_at_run_time():
    """The probe (no GPU) launched the fixture's 4 programs; the model assumes one per SM of the GPU it targets."""
    sizes = {"M": 4096, "N": 4096, "K": 512}
    source = _source("gemm_persistent")
    proposal = asyncio.run(propose_tiling(_NoGpu(), reference_source=REFERENCE, candidate_source=source,
                                          options=EvalOptions(size_overrides={**sizes}), gpu=H200, dims=sizes,
                                          kind="gemm",
                                          launches=_probe(source, sizes)))
    warning = next(w for w in proposal.warnings if w.startswith("matmul_persistent: a persistent grid"))
    assert "set at run time" in warning and "launched 4 programs" in warning and "assumes 132" in warning


def test_a_block_neither_its_name_nor_the_grid_places_is_said_to_be_priced_alike():
    """BLOCK_K renamed CHUNK in the persistent GEMM: the name says nothing and a persistent grid does not follow the
    tiles, so the model cannot tell what CHUNK tiles; the reply says every value of it is priced alike."""
    source = _source("gemm_persistent").replace("BLOCK_K", "CHUNK")
    dims = normalize_dims("gemm", DIMS)
    space = extract_space(source, kind="gemm", dims=dims)
    assert space.param("CHUNK").role == "block" and len(space.param("CHUNK").choices) > 1
    _, notes = kernel_calls(space, "gemm", dims, _probe(source))
    assert any(n.startswith("matmul_persistent: neither the name CHUNK nor its grid") and "alike" in n for n in notes)


def test_attention_heads_are_read_from_whichever_grid_axis_holds_them():
    """(cdiv(T, BLOCK_M), B x H) and (B x H, cdiv(T, BLOCK_M)) launch the same programs: BH is the count over
    the query tiles, not the grid's second entry (read as 8 heads when it was the query tiles)."""
    record = {"ints": {"T": 512, "H": 8, "C": 768, "D": 64}, "tensors": {"qkv": [2, 512, 2304]},
              "constexprs": {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_D": 64}}
    assert launch_dims("attention", {**record, "grid": [8, 1024]})["BH"] == 1024
    assert launch_dims("attention", {**record, "grid": [1024, 8]})["BH"] == 1024
    assert launch_dims("attention", {**record, "grid": [8192]})["BH"] == 1024


class _NoGpu:
    def has_gpu(self) -> bool:
        return False


TWO_KERNELS = '''import triton
import triton.language as tl


@triton.jit
def rows_persistent(x_ptr, n_rows, BLOCK_ROWS: tl.constexpr):
    for tile in range(tl.program_id(0), tl.cdiv(n_rows, BLOCK_ROWS), tl.num_programs(0)):
        tl.store(x_ptr + tile * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS), 0.0)


@triton.jit
def rows_plain(x_ptr, n_rows, BLOCK_ROWS: tl.constexpr):
    tl.store(x_ptr + tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS), 0.0)
'''


def test_only_the_persistent_kernel_of_a_candidate_gets_a_persistent_grid():
    """The persistent grid's program count used to apply to every kernel of a source that had one."""
    space = extract_space(TWO_KERNELS)
    alone = {k.name: persistent_programs(space.model_copy(update={"kernels": [k]}), H200.sm_count)
             for k in space.kernels}
    assert alone == {"rows_persistent": H200.sm_count, "rows_plain": None}
    assert {k.name: k.persistent for k in space.kernels} == {"rows_persistent": True, "rows_plain": False}
