import os, sys, json, subprocess
VARIANTS = [
 ("baseline", {}, "the model at this commit", "—"),
 ("little_min", {"WMODE": "min", "WL": "0.8e-6", "WR": "6e9"}, "per-warp Little's law: rate = min(R, B_w / L), B_w = bytes a warp has in flight per trip (tile bytes per thread x 32, x4 when LLVM unrolls, i.e. <= 2 16-byte loads per thread)", "L, R fit on batch9 rowsum_a (log-time error over 92 unspilled configs)"),
 ("little_sum", {"WMODE": "sum", "WL": "0.6e-6", "WR": "8e9"}, "per-warp Little's law with a transfer term: rate = B_w / (L + B_w / R)", "L, R fit on batch9 rowsum_a (log-time error)"),
 ("little_floor", {"WMODE": "maxsum", "WL": "0.6e-6", "WR": "8e9"}, "max(WARP_STREAM_BPS, B_w / (L + B_w / R)): Little only above the measured small-tile rate", "L, R fit on batch9 rowsum_a"),
 ("little_min_p6", {"WMODE": "min", "WL": "0.8e-6", "WR": "6e9", "OP": "6"}, "little_min with a sharper knee (OVERLAP_P 6)", "as little_min; p not fit"),
 ("no_wave", {"NOWAVE": "1"}, "no wave-quantisation factor for streaming kernels (dynamic scheduling refills a freed slot at once)", "no constant"),
 ("tail_rounds", {"TAIL": "ceil"}, "loops: full rounds at c programs per SM plus the last partial round priced at its own resident warps (replaces the x(1 + 0.3 idle share) factor)", "no constant"),
 ("tail_rounds_little", {"TAIL": "ceil", "WMODE": "maxmin", "WL": "1.4e-6", "WR": "6e9"}, "tail_rounds + per-warp Little floor (min form)", "L, R read off batch9 rowsum_a few-warp configs"),
 ("sqrt_per_row", {"SQRT_ROW": "1"}, "norm: sqrt/rsqrt charged once per row, not per element", "no constant"),
 ("sqrt_per_row_chain05", {"SQRT_ROW": "1", "DLAT": "0.5e-6"}, "sqrt per row + one-block-per-row DRAM chain 0.5 us per round (batch10 shows ~0.87 us per round of 8 programs)", "0.5 us read off batch10"),
 ("ilp_issue", {"ILP": "1"}, "issue derate credits per-thread ILP (warps per scheduler x elements per thread >= 4 hides ALU latency)", "no constant"),
 ("ilp_little_min", {"ILP": "1", "WMODE": "min", "WL": "0.8e-6", "WR": "6e9"}, "ilp_issue + little_min", "as little_min"),
 ("ptxas_regs", {"REGFIT": "1"}, "occupancy from a register count fit to ptxas (reduction loop 22 + 1.2/element, norm loop 22 + 2.1, norm single 24 + 1.0); the spill rule unchanged", "fit on the compiled registers of batch9 (rowsum_a 41 -> 60 of 93, layernorm_a loop 27 -> 31 of 44, single 12 -> 18 of 28 programs-per-SM agreements); no times"),
 ("ptxas_regs_no_wave", {"REGFIT": "1", "NOWAVE": "1"}, "ptxas_regs + no_wave", "as ptxas_regs"),
 ("oracle_regs_rowsum", {"ORACLE": "1"}, "diagnostic only: rowsum occupancy from the H200's own compiled registers (batch9)", "not a model: reads compiler output of the measured run"),
 ("soft_knee_p1.5", {"LP": "1.5"}, "loops: bandwidth and warp-stream terms combined with a softer knee (p 1.5; 1 = the M/M/1 fixed point of Little's law with queueing latency, inf = a hard roofline)", "p chosen on batch9 rowsum_a rho (fit_knee.py)"),
 ("soft_knee_p1.5_no_wave", {"LP": "1.5", "NOWAVE": "1"}, "soft_knee_p1.5 + no_wave", "as soft_knee_p1.5"),
 ("tail_rounds_issue", {"TAIL": "ceil", "TAIL_ISSUE": "1"}, "tail_rounds with the last round's issue rate at its own resident warps", "no constant"),
 ("tail_rounds_issue_p2", {"TAIL": "ceil", "TAIL_ISSUE": "1", "LP": "2"}, "tail_rounds_issue + knee p 2", "p from fit_knee.py (batch9 rowsum_a)"),
]
out = {}
for name, env, what, fit in VARIANTS:
    e = dict(os.environ); e.update(env)
    code = "import sys, json; sys.argv=['x']; sys.path.insert(0,'benchmarks/results/archive/tiling/probes_2026-12-01_5ca66b1'); import ev; t = ev.main(False); print('JSON' + json.dumps(t))"
    r = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, cwd=".")
    line = [l for l in r.stdout.splitlines() if l.startswith('JSON')]
    if not line: print(name, r.stderr[-2000:]); continue
    t = json.loads(line[0][4:])
    out[name] = {"env": env, "mechanism": what, "fit": fit, "rho": {c: {k: v for k, v in d.items() if k != 's8/16'} for c, d in t.items() if c in ('softmax_a','softmax_b','layernorm_a','layernorm_b','rowsum_a','rowsum_b','biasgelu_a','biasgelu_b')}}
    print(name, 'done')
json.dump(out, open('benchmarks/results/archive/tiling/probes_2026-12-01_5ca66b1/variants.json', 'w'), indent=1)
