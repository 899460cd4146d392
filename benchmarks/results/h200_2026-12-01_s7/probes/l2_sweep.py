"""L2 probe layouts on the H200: how close does an SM read stream from L2 come to ncu's peak for SM-sourced L2
sectors (lts__t_sectors_srcunit_tex, 10.3 TB/s in l2_fabric/)? Times each layout with the calibration's timer
conditions (best of 10 CUDA-event runs, after warm-up). Prints one RESULT json line; writes $OUT/l2_sweep.json."""
import json, os, sys
import torch, triton, triton.language as tl


@triton.jit
def reread(x_ptr, out_ptr, n_blocks, PASSES: tl.constexpr, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    per_prog = tl.cdiv(n_blocks, nprog * UNROLL)
    for p in range(PASSES):
        for j in range(per_prog):
            for u in tl.static_range(UNROLL):
                blk = (pid + (j * UNROLL + u) * nprog + p * 7) % n_blocks
                acc += tl.load(x_ptr + blk * BLOCK + tl.arange(0, BLOCK), cache_modifier=".cg")
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


props = torch.cuda.get_device_properties(0)
sms, l2 = props.multi_processor_count, props.L2_cache_size
rows = []
for block in (1024, 2048, 4096):
    buf_bytes = (l2 // 3) // (block * 4) * (block * 4)
    buf = torch.ones(buf_bytes // 4, device="cuda")
    n_blocks = buf.numel() // block
    for per_sm in (2, 4, 8, 16):
        for warps in (4, 8):
            for unroll in (1, 2, 4):
                programs = min(n_blocks, sms * per_sm)
                per_prog = triton.cdiv(n_blocks, programs * unroll)
                out = torch.empty(programs, device="cuda")
                fn = lambda: reread[(programs,)](buf, out, n_blocks, PASSES=16, BLOCK=block, UNROLL=unroll, num_warps=warps)
                try:
                    for _ in range(3):
                        fn()
                    torch.cuda.synchronize()
                    ts = []
                    for _ in range(10):
                        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        a.record(); fn(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
                    nbytes = 4.0 * block * per_prog * unroll * programs * 16
                    rows.append({"block": block, "per_sm": per_sm, "warps": warps, "unroll": unroll,
                                 "tb_s": round(nbytes / (min(ts) * 1e-3) / 1e12, 3)})
                except Exception as exc:
                    rows.append({"block": block, "per_sm": per_sm, "warps": warps, "unroll": unroll, "error": repr(exc)[:200]})
rows.sort(key=lambda r: -r.get("tb_s", 0))
print("RESULT " + json.dumps(rows[:12]))
open(os.path.join(os.environ.get("OUT", "."), "l2_sweep.json"), "w").write(json.dumps(rows, indent=1))
