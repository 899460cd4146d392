"""Fit the streaming term's mechanisms to the row_sum sweep (stream_sweep_*.json; H200). CPU only.

    python3 benchmarks/results/tiling/s9_probes/fit_sweep.py [SWEEP.json]

Per config: P programs, BLOCK_M x BLOCK_N fp32 per trip, w warps. The model's own register estimate gives resident
CTAs per SM; each program streams at rho = w * r_w(w, regs) when alone; concurrent programs share DRAM through a
soft min (exponent p); programs run in rounds of (SMs x resident CTAs)."""
import json, math, sys
from pathlib import Path
import numpy as np
from scipy.optimize import least_squares

SMS = 132
rows = json.loads(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).with_name("stream_sweep_events.json")).read_text())
rows = [r for r in rows if "ms" in r and r['registers'] < 255]


def layout_rows(bm, bn, w, vec=4):
    vec = min(vec, bn); tpw1 = min(32, bn // vec); tpw0 = 32 // tpw1
    wpc1 = min(w, max(1, bn // (vec * tpw1))); wpc0 = w // wpc1
    return max(1, bm // (tpw0 * wpc0))


def regs_est(bm, bn, w):  # regfit9.py: max(32, 4 + 1.1 / element + 4 / row a thread covers)
    per_thread = bm * bn / (32 * w)
    return min(256, math.ceil(max(32, 4 + 1.1 * per_thread + 4 * layout_rows(bm, bn, w)) / 8) * 8)


def ctas(w, regs):
    threads = 32 * w
    return max(1, min(32, 2048 // threads, 65536 // (min(regs, 255) * threads)))


def predict(theta, r, use_compiled=False):
    R1, R2, g0, alpha, gmax, bw, p, off, cap = theta
    bm, bn, w, P = r["BLOCK_M"], r["BLOCK_N"], r["num_warps"], r["programs"]
    regs = r["registers"] if use_compiled else regs_est(bm, bn, w)
    c = ctas(w, regs)
    rw = (R1 if w == 1 else R2) * min(gmax, max(1.0, regs / g0)) ** alpha
    rho = w * rw * 1e9
    prog_bytes = r["bytes"] / P
    slots = SMS * c

    def wave(n):  # n programs at once, spread over min(n, SMS) SMs
        active = min(n, SMS)
        per_sm = min(n / active * rho, cap * 1e9)
        d = active * per_sm
        x = d * bw * 1e12 / (d ** p + (bw * 1e12) ** p) ** (1 / p)
        return n * prog_bytes / x

    full, rem = divmod(P, slots)
    t = full * wave(slots) + (wave(rem) if rem else 0.0)
    return t * 1e3 + off * 1e-3


def resid(theta):
    return np.array([math.log(predict(theta, r)) - math.log(r["ms"]) for r in rows])


theta0 = [4.0, 2.2, 48.0, 1.0, 3.0, 3.7, 2.0, 5.0, 40.0]
lo = [0.5, 0.5, 16, 0.0, 1.0, 2.0, 1.0, 0.0, 10.0]
hi = [20, 20, 200, 3.0, 10.0, 6.0, 8.0, 20.0, 200.0]
fit = least_squares(resid, theta0, bounds=(lo, hi))
names = "R1 R2 g0 alpha gmax bw p off_us cap".split()
print({n: round(v, 3) for n, v in zip(names, fit.x)})
res = resid(fit.x)
print("rms log err", float(np.sqrt(np.mean(res ** 2))), "max", float(np.max(np.abs(res))))
# per program count: spearman of predicted vs measured
from scipy.stats import spearmanr
for P in sorted({r["programs"] for r in rows}):
    sub = [r for r in rows if r["programs"] == P]
    print(P, len(sub), round(spearmanr([predict(fit.x, r) for r in sub], [r["ms"] for r in sub])[0], 3))
