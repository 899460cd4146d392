"""Register estimate for the looping row reduction vs the registers ptxas gave on the H200 (stream_sweep), scored
by how often the resident CTAs per SM it implies match the compiled ones."""
import json, itertools, math
rows = [r for r in json.load(open('stream_sweep_events.json')) if r.get('registers')]
seen = {(r['BLOCK_M'], r['BLOCK_N'], r['num_warps']): r['registers'] for r in rows}
def ctas(w, regs):
    t = 32 * w
    return max(0, min(32, 2048 // t, 65536 // (math.ceil(min(regs, 255) / 8) * 8 * t)))
def layout(bm, bn, w, vec=4):
    vec = min(vec, bn); tpw1 = min(32, bn // vec); tpw0 = 32 // tpw1
    wpc1 = min(w, max(1, bn // (vec * tpw1))); wpc0 = w // wpc1
    return max(1, bm // (tpw0 * wpc0)), max(1, bn // (vec * tpw1 * wpc1))
best = []
for a, b, cc, fl in itertools.product(range(0, 30, 2), [1.0, 1.1, 1.2, 1.25, 1.3, 1.4], [0, 0.5, 1, 1.5, 2, 3, 4], [24, 28, 30, 32, 36]):
    agree = 0; err = 0
    for (bm, bn, w), reg in seen.items():
        ept = bm * bn / (32 * w); rpt, _ = layout(bm, bn, w)
        est = max(fl, a + b * ept + cc * rpt)
        agree += ctas(w, est) == ctas(w, reg); err += abs(min(est, 255) - reg)
    best.append((agree, -err, a, b, cc, fl))
best.sort(reverse=True)
print(len(seen), best[:8])
cur = sum(ctas(w, 24 + bm * bn / (32 * w) * 1.4) == ctas(w, reg) for (bm, bn, w), reg in seen.items())
print('current model (24 + 1.4/elem) agrees on', cur)
