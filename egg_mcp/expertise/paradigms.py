"""The seed catalogue: for each op class, algorithms that differ in *structure* (grid, dataflow,
number of passes), not in constants.

EGG's seeds stage gains most when the k seeds explore different structures: tuning later only
moves a kernel within its structure. Each entry says what the structure is, when it wins, what
tends to go wrong, and the Triton idioms that build it. Text is terse on purpose: it is pasted
into a client's context.
"""

from __future__ import annotations

from pydantic import BaseModel


class Paradigm(BaseModel):
    key: str
    op_class: str
    name: str
    structure: str
    wins_when: str
    risks: str
    triton_hints: str


def _p(op_class: str, key: str, name: str, structure: str, wins_when: str, risks: str, hints: str) -> Paradigm:
    return Paradigm(key=f"{op_class}.{key}", op_class=op_class, name=name, structure=structure,
                    wins_when=wins_when, risks=risks, triton_hints=hints)


_ELEMENTWISE = (
    _p("elementwise", "flat_1d_fused", "flat 1-D fused pass",
       "view every operand as contiguous 1-D; grid = ceil(numel/BLOCK); each program loads BLOCK elements of "
       "each input once, applies the whole op chain in registers, stores once",
       "contiguous same-shape operands; any size (the memory floor is one read per input + one write)",
       "non-contiguous inputs (call .contiguous() in glue costs a copy: index with strides instead); "
       "int32 offset overflow beyond 2^31 elements",
       "offs = pid * BLOCK + tl.arange(0, BLOCK); mask = offs < n; BLOCK 1024-4096, num_warps 4-8; "
       "use tl.int64 offsets when numel > 2**31"),
    _p("elementwise", "tiled_2d_broadcast", "2-D tiled with broadcast operands",
       "grid over (row tiles, column tiles); each program loads a [BLOCK_R, BLOCK_C] tile of the full-size "
       "operands and the matching slice of each broadcast operand (bias row, per-channel scale) once",
       "operands broadcast along one axis (bias [C], per-row scale [R,1]): the small operand is read once per tile "
       "instead of once per element",
       "tile along the contiguous dim must be the wide one (coalescing); masks on both axes",
       "r = pid_r*BLOCK_R + tl.arange(0, BLOCK_R)[:, None]; c = pid_c*BLOCK_C + tl.arange(0, BLOCK_C)[None, :]; "
       "b = tl.load(bias_ptr + c, mask=c < C)  # broadcast over rows"),
    _p("elementwise", "persistent_grid_stride", "persistent grid-stride loop",
       "grid = a few programs per SM; each loops over tiles pid, pid + num_programs, ... so launch and tail "
       "effects vanish",
       "very large tensors where the last partial wave matters, or many tiny elementwise outputs",
       "fewer programs than needed to saturate DRAM if too small a grid; loop overhead for small tensors",
       "for tile in range(tl.program_id(0), n_tiles, tl.num_programs(0)): ...; grid = (4 * NUM_SMS,)"),
)

_BROADCAST = tuple(
    p.model_copy(update={"op_class": "broadcast", "key": p.key.replace("elementwise.", "broadcast.")})
    for p in (_ELEMENTWISE[1], _ELEMENTWISE[0], _ELEMENTWISE[2])
)

_REDUCTION = (
    _p("reduction", "row_per_program", "one program per output row",
       "grid = number of outputs; each program loops over its row in BLOCK chunks accumulating in fp32 "
       "registers, reduces once at the end, stores one value",
       "many rows (>= a few times the SM count); any row length",
       "few rows leave SMs idle; reducing a non-contiguous dim gives strided loads (load 2-D tiles "
       "[BLOCK_R, BLOCK_K] and reduce over the strided axis instead)",
       "acc = tl.zeros([BLOCK], tl.float32); for k in range(0, n, BLOCK): acc += tl.load(p + k + offs, mask=...); "
       "tl.store(out + row, tl.sum(acc, axis=0))"),
    _p("reduction", "multi_row_tile", "several rows per program (2-D tile)",
       "grid = ceil(rows/ROWS); each program reduces a [ROWS, BLOCK] tile along axis 1 (or axis 0 for a "
       "reduction over the leading dim, which keeps loads coalesced)",
       "short rows (< ~1024) where one row per program wastes lanes, or reductions over a strided dim",
       "register pressure grows with ROWS*BLOCK; masks on both axes",
       "x = tl.load(p + rows[:, None]*stride + cols[None, :], mask=...); tl.sum(x, axis=1)"),
    _p("reduction", "split_row_two_pass", "split row + second pass",
       "grid = (rows, SPLITS); each program reduces one slice of a row into a partials buffer; a second tiny "
       "kernel (or a loop in the same kernel after a counter) combines the partials",
       "few rows, long rows: rows < 2x SMs means one-program-per-row cannot fill the GPU",
       "extra launch (~3 us) and partial traffic; choose SPLITS so rows*SPLITS ~ 2-4x SMs",
       "partials = torch.empty(rows, SPLITS) (allocation is glue); kernel 2 reduces [SPLITS] per row"),
    _p("reduction", "atomics", "chunked with atomic accumulation",
       "grid over (rows, chunks); each program reduces its chunk and tl.atomic_add / tl.atomic_max into a "
       "zero-initialised output",
       "huge inputs with few outputs (full reductions), one launch",
       "fp32 atomics make the summation order nondeterministic (can break 1e-4 on long sums); no argmax; "
       "the output must be zeroed (torch.zeros in glue)",
       "tl.atomic_add(out_ptr + row, tl.sum(chunk, 0)); mean = scale in a 1-element epilogue or by 1/n before the add"),
)

_SOFTMAX = (
    _p("softmax", "row_in_registers", "row in registers (one read, one write)",
       "one program per row; BLOCK = next_pow2(row length); load the row once, max, exp, sum, divide, store",
       "rows up to ~8-16K fp32 elements: exactly the memory floor (1 read + 1 write)",
       "register spills for long rows (raise num_warps to 8-16 or switch paradigm); masked lanes waste when "
       "the row length is just above a power of two",
       "x = tl.load(..., other=-float('inf')); x -= tl.max(x, 0); e = tl.exp(x); tl.store(..., e / tl.sum(e, 0))"),
    _p("softmax", "online_looped", "online single-pass statistics + write pass",
       "one program per row; loop over BLOCK chunks keeping running max m and rescaled sum "
       "l = l*exp(m_old-m_new) + sum(exp(x-m_new)); then a second loop writes exp(x-m)/l",
       "rows too long for registers; 2 reads + 1 write, the second read often hits L2",
       "exp of the rescale factor per chunk; precision of the running sum (keep fp32)",
       "m = tl.full([BLOCK], -inf); l = tl.zeros([BLOCK]); per-lane online update, combine lanes at the end "
       "with M = tl.max(m); L = tl.sum(l * tl.exp(m - M))"),
    _p("softmax", "split_row_partials", "split row across programs + combine",
       "grid = (rows, SPLITS); pass 1 writes each slice's (max, sum-exp) to a small buffer; pass 2 (second "
       "kernel) combines the partials per row and normalises its slice",
       "few very long rows (rows < SM count): spreads one row over many SMs",
       "two launches and one extra read of x; partial buffer indexing",
       "kernel 1: tl.store(m_ptr + row*SPLITS + s, m); kernel 2: load all SPLITS partials, M, L, write slice"),
)

_NORMALIZATION = (
    _p("normalization", "row_in_registers", "row in registers, fused affine",
       "one program per normalised row (layernorm/rmsnorm: the last dims; groupnorm: one (sample, group)); "
       "load once, mean and variance from the registers, normalise, weight/bias, store",
       "rows that fit registers (<= ~16K fp32); exactly the memory floor",
       "spills for long rows; variance via E[x^2]-E[x]^2 loses precision (use mean first, then sum((x-mean)^2))",
       "mean = tl.sum(x, 0) / n; xc = tl.where(mask, x - mean, 0.); var = tl.sum(xc*xc, 0) / n; "
       "y = xc * tl.rsqrt(var + eps) * w + b"),
    _p("normalization", "looped_row", "looped statistics pass + normalise pass",
       "one program per row; loop 1 accumulates sum and sum of squares (or Welford) in fp32 chunks; loop 2 "
       "re-reads, normalises and writes",
       "long rows (groupnorm / instance norm over H*W, layernorm over > 16K)",
       "2 reads + 1 write; naive sum-of-squares cancels for large means (use Welford or shifted sums)",
       "for k in range(0, n, BLOCK): x = tl.load(...); s += x; ss += x*x  # fp32 accumulators"),
    _p("normalization", "channel_stats_then_apply", "per-channel statistics kernel + apply kernel",
       "batchnorm (training) reduces over N and spatial dims per channel: kernel 1 computes per-channel "
       "mean/var with a grid over (channel, chunk) and partials or atomics; kernel 2 is an elementwise "
       "normalise-and-affine pass (fuse the following activations there)",
       "BatchNorm/InstanceNorm in training mode where the reduced extent is strided and large",
       "the reduction axis is not contiguous in NCHW: tile [BLOCK_N*HW] per channel with strided loads; "
       "running_mean/var updates must match PyTorch (unbiased var for the running stats)",
       "grid1 = (C, SPLITS); grid2 = flat elementwise with c = (offs // HW) % C to index mean/rstd"),
)

_GEMM = (
    _p("gemm", "tiled_grouped", "tiled tl.dot with grouped (swizzled) program order, fused epilogue",
       "grid = ceil(M/BM)*ceil(N/BN); program ids remapped so GROUP_M row tiles share B tiles in L2; K loop "
       "of tl.dot into an fp32 accumulator; bias/activation/scale applied to the accumulator before the store",
       "the default for large M, N: one output write, epilogue free",
       "tile count < SM count (small M*N) leaves SMs idle; fp32 inputs at strict "
       "tolerance need a path the ladder admits: 'tf32x3', an fp16/bf16 split or 'ieee' (TF32 by default fails)",
       "pid_m, pid_n from GROUP_M swizzle; acc += tl.dot(a, b, input_precision=PREC); "
       "BM=BN=128, BK=32-64, num_warps=4-8, num_stages=3-4"),
    _p("gemm", "split_k", "split-K with a reduction pass",
       "grid = (tiles, SPLIT_K); each program multiplies one K slice; partial tiles are summed with "
       "tl.atomic_add (fp32) or into a [SPLIT_K, M, N] buffer reduced by a second kernel that applies the epilogue",
       "small M*N, large K (tiles < SMs): K parallelism fills the GPU",
       "nonlinear epilogues (relu, gelu) only after the full sum: second kernel; atomics are nondeterministic "
       "and need a zeroed output",
       "k_lo = pid_k * K_PER_SPLIT; loop k in [k_lo, k_lo + K_PER_SPLIT); epilogue kernel reads the partials"),
    _p("gemm", "persistent", "persistent tiles (one program per SM)",
       "grid = NUM_SMS; each program walks tiles tile_id = pid, pid + NUM_SMS, ... in grouped order, "
       "keeping its accumulator loop hot and overlapping the epilogue of one tile with loads of the next",
       "tile count a few waves but not a whole number of waves (wave-quantisation tail), many small tiles",
       "little gain when tiles >> SMs; index math for the grouped order inside the loop",
       "for tile in range(pid, num_tiles, NUM_SMS): pid_m, pid_n = swizzle(tile); ...; NUM_SMS from "
       "torch.cuda.get_device_properties(0).multi_processor_count"),
)

_BATCHED_GEMM = (
    _p("batched_gemm", "batch_in_grid", "batch as a grid axis",
       "grid = (tiles_m*tiles_n, batch); per-batch base pointers from strides; tl.dot tiles as in GEMM; "
       "epilogue fused",
       "many batches of moderate matrices",
       "small per-batch matrices waste tiles (masked); batch strides of broadcast operands may be 0",
       "pid_b = tl.program_id(1); a_ptr += pid_b * stride_ab; b_ptr += pid_b * stride_bb"),
    _p("batched_gemm", "flatten_batch", "fold the batch into M",
       "when B is shared across the batch (stride 0) or A's batch is contiguous, treat [batch*M, K] x [K, N] "
       "as one GEMM with tiles that cross batch boundaries",
       "shared weight matrix, small M per batch: bigger tiles, better tensor-core use",
       "only valid when the B operand is identical across the batch",
       "M_total = batch * M; reuse the plain GEMM kernel"),
    _p("batched_gemm", "persistent_batched", "persistent over (batch, tile)",
       "grid = NUM_SMS; programs loop over the flattened (batch, tile) index space",
       "many tiny matrices (launch-bound) or a ragged total tile count",
       "same as persistent GEMM",
       "for t in range(pid, batch * tiles, NUM_SMS): b = t // tiles; ..."),
)

_CONVOLUTION = (
    _p("convolution", "implicit_gemm", "implicit GEMM (tl.dot over gathered patches)",
       "M = N*Hout*Wout, N = Cout, K = Cin/groups*R*S; each program builds its A tile by gathering input "
       "patches on the fly (no im2col buffer) and multiplies with the reshaped weight tile; epilogue fused",
       "standard convs with Cin*R*S >= 32: tensor cores do the work",
       "NCHW makes the gathered A loads strided along K (iterate K as (r, s, c) with c innermost, or read an "
       "NHWC copy made once); padding and stride masks; transposed conv needs the scatter form",
       "m -> (n, oh, ow); k -> (c, r, s); ih = oh*stride - pad + r*dil; mask = (0 <= ih < H) & ...; "
       "acc += tl.dot(a_tile, w_tile)"),
    _p("convolution", "direct", "direct convolution (output tile, loop over window)",
       "each program owns a [BLOCK_OC, BLOCK_PIX] output tile and loops over Cin x R x S with broadcast FMAs "
       "(no tensor cores); weights for the tile stay in registers",
       "depthwise / grouped convs (groups = Cin), tiny Cin, 1-D convs with small kernels",
       "CUDA-core FLOPs only: loses badly on large dense convs",
       "acc += w[:, None] * x[None, :] inside static loops over r, s (tl.static_range)"),
    _p("convolution", "im2col_then_gemm", "im2col kernel + tiled GEMM kernel",
       "kernel 1 writes the patch matrix [N*Hout*Wout, Cin*R*S]; kernel 2 is a tiled tl.dot GEMM with the "
       "fused epilogue",
       "a quick, robust seed; 1x1 convs (im2col is a view: pure GEMM)",
       "R*S times the input traffic for the patch matrix; memory-bound for large inputs",
       "1x1 conv: treat x as [N*H*W, Cin] (NHWC) or loop over N with [Cin, H*W] operands"),
)

_POOLING = (
    _p("pooling", "window_per_output", "one output element per lane, loop over the window",
       "flat grid over outputs; each lane computes its window start and loops over the kernel window "
       "(static loops), max/avg in registers",
       "any pooling; simple and coalesced along the output's last dim",
       "overlapping windows (stride < kernel) re-read inputs (mostly L1/L2 hits)",
       "for kh in tl.static_range(KH): for kw in tl.static_range(KW): v = tl.load(..., other=-inf); acc = "
       "tl.maximum(acc, v)"),
    _p("pooling", "row_tile_reuse", "2-D output tile with the input halo loaded once",
       "each program owns a [BLOCK_H, BLOCK_W] output tile per (n, c), loads the covering input region once "
       "and reduces windows from registers",
       "overlapping windows (3x3 stride 1/2) on large spatial maps",
       "halo indexing and masks; register pressure",
       "load input rows h0*stride .. h0*stride + BLOCK_H*stride + KH once"),
    _p("pooling", "reduction_per_plane", "global / adaptive pooling as a row reduction",
       "adaptive or global pooling over H*W is a reduction per (n, c): one program per plane (or several "
       "planes per program) looping over H*W",
       "global average pooling, adaptive pooling to small outputs",
       "non-contiguous planes in channels-last inputs",
       "same as reduction.row_per_program with row = H*W"),
)

_ATTENTION = (
    _p("attention", "flash_online_softmax", "flash-style fused attention (online softmax)",
       "program per (batch*head, BLOCK_M queries); Q tile resident; loop over K/V blocks: S = QK^T (tl.dot), "
       "running max m, sum l, rescale acc, acc += P V (tl.dot); one write of O",
       "any sequence length: never materialises the [L, L] scores",
       "rescaling precision (keep m, l, acc in fp32); causal masks; head dims not a power of two",
       "m_new = tl.maximum(m, tl.max(s, 1)); p = tl.exp(s - m_new[:, None]); alpha = tl.exp(m - m_new); "
       "acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)"),
    _p("attention", "split_kv", "split KV across programs + combine (flash-decoding)",
       "grid over (batch*head, query tiles, KV splits); each program produces a partial (m, l, acc) for its "
       "KV slice; a second kernel combines",
       "few queries (decoding, short Lq) with long KV: not enough query tiles to fill the SMs",
       "partial buffers, second launch",
       "combine: M = max m_i; O = sum(exp(m_i - M) * acc_i) / sum(exp(m_i - M) * l_i)"),
    _p("attention", "three_kernels", "scores GEMM + softmax + PV GEMM (materialised)",
       "kernel 1 writes S = scale*QK^T, kernel 2 a row softmax, kernel 3 P@V",
       "tiny sequence lengths (L <= 128) where the [L, L] matrix is small; a correctness baseline",
       "L^2 memory traffic; three launches",
       "reuse the batched GEMM and softmax seeds"),
)

_SCAN = (
    _p("scan", "blocked_scan_with_carry", "blocked scan with a running carry",
       "one program per row; loop over BLOCK chunks: tl.cumsum within the chunk, add the carry, carry += "
       "chunk total",
       "many rows of any length",
       "sequential over the row: few long rows leave SMs idle; fp32 accumulation order differs from torch "
       "(mind 1e-4 on long rows)",
       "c = tl.cumsum(x, axis=0) + carry; carry += tl.sum(x, axis=0)"),
    _p("scan", "associative_scan_in_registers", "whole row in registers with tl.associative_scan",
       "one program per row (or a [ROWS, BLOCK] tile); tl.associative_scan with a combine function over the "
       "whole row at once",
       "rows that fit registers; custom operators (cumprod, cummax, pairs like (value, index))",
       "spills for long rows",
       "@triton.jit def combine(a, b): return a + b; tl.associative_scan(x, axis=1, combine_fn=combine)"),
    _p("scan", "reduce_then_scan", "three-phase: chunk totals, scan of totals, add offsets",
       "kernel 1 reduces each chunk of a row to its total; kernel 2 scans the totals; kernel 3 rescans each "
       "chunk adding its offset (or fuse 2 into 3 with a decoupled look-back)",
       "few very long rows: parallel over chunks",
       "three launches, extra read",
       "grid = (rows, CHUNKS) for kernels 1 and 3"),
)

_GATHER_SCATTER = (
    _p("gather_scatter", "row_gather", "one program per gathered row",
       "each program reads one index, then copies/transforms the selected row with vectorised contiguous "
       "loads (embedding, index_select along dim 0)",
       "gathering whole rows: coalesced copies",
       "index bounds (mask or clamp); int64 offsets for big tables",
       "idx = tl.load(index_ptr + pid); row = tl.load(table + idx * stride + cols, mask=...)"),
    _p("gather_scatter", "element_gather", "flat gather over outputs",
       "flat grid over output elements; each lane computes its source offset from the index tensor",
       "gathers along an inner dim (torch.gather along dim=-1)",
       "uncoalesced source reads are inherent; keep the output writes coalesced",
       "src = tl.load(index_ptr + offs); v = tl.load(x_ptr + row * stride + src)"),
    _p("gather_scatter", "scatter_atomic", "scatter with atomics (or sort + segmented reduce)",
       "each lane adds its value into out[index] with tl.atomic_add; alternatively sort by index then a "
       "segmented reduction",
       "scatter_add / index_add with collisions",
       "nondeterministic fp32 order; atomics contention on hot indices",
       "tl.atomic_add(out_ptr + idx, v, mask=mask)"),
)

PARADIGMS: dict[str, tuple[Paradigm, ...]] = {
    "elementwise": _ELEMENTWISE,
    "broadcast": _BROADCAST,
    "reduction": _REDUCTION,
    "softmax": _SOFTMAX,
    "normalization": _NORMALIZATION,
    "gemm": _GEMM,
    "batched_gemm": _BATCHED_GEMM,
    "convolution": _CONVOLUTION,
    "pooling": _POOLING,
    "attention": _ATTENTION,
    "scan": _SCAN,
    "gather_scatter": _GATHER_SCATTER,
}

FUSION_SCOPES: tuple[Paradigm, ...] = (
    _p("fusion", "single_kernel", "the whole chain in one kernel",
       "one launch computes every op of the fusible chain; intermediates live in registers",
       "the chain's intermediates are large (the analysis lists the bytes saved)",
       "the heaviest op dictates the tile shape; a reduction in the middle may need the whole row per program",
       "write the heavy op's kernel first, then inline the others in its prologue/epilogue"),
    _p("fusion", "split_at_global_reduction", "two kernels split at the op that needs a global view",
       "kernel 1: the heavy op with everything that is local to its tile fused; kernel 2: the op that needs "
       "a whole row/channel (softmax, norm statistics) with the rest of the chain fused",
       "a reduction whose extent exceeds one tile (e.g. GEMM then row softmax over N > BLOCK_N)",
       "one intermediate round trip through DRAM",
       "keep the intermediate in the task dtype (or fp32 when precision is tight)"),
)


def paradigms_for(op_class: str) -> tuple[Paradigm, ...]:
    if op_class not in PARADIGMS:
        raise KeyError(f"no paradigms for op class {op_class!r}; known: {', '.join(PARADIGMS)}")
    return PARADIGMS[op_class]
