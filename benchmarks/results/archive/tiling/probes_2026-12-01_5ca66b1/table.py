"""variants.json -> variants.md: per mechanism, per case and run, the replayed rho (see README.md here)."""
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
v = json.loads((HERE / "variants.json").read_text())
runs = [("A_b4a4599", "A"), ("B_42095a3", "B"), ("exh_batch9", "b9"), ("exh_batch10", "b10")]
cases = ["layernorm_a", "rowsum_a", "rowsum_b", "layernorm_b", "softmax_a", "softmax_b", "biasgelu_a", "biasgelu_b"]
base = v["baseline"]["rho"]
head = "| mechanism | " + " | ".join(f"{c} {s}" for c in cases for k, s in runs if base[c].get(k) is not None) + " | < 0.7 | lowered (> 0.005) |"
lines = [head, "|" + " --- |" * (head.count("|") - 1)]
for name, d in v.items():
    cells, below, drops = [], 0, 0
    for c in cases:
        for k, s in runs:
            b = base[c].get(k)
            if b is None:
                continue
            x = d["rho"][c].get(k)
            below += x < 0.7
            drops += x < b - 0.005
            cells.append(("**" if x < 0.7 else "") + f"{x:.3f}" + ("**" if x < 0.7 else ""))
    lines.append(f"| {name} | " + " | ".join(cells) + f" | {below} | {drops} |")
legend = ["", "Mechanisms (what each changes, and what its constants were fit on):", ""]
legend += [f"- **{n}**: {d['mechanism']}. Fit: {d['fit']}." for n, d in v.items()]
(HERE / "variants.md").write_text("\n".join(lines + legend) + "\n")
print("\n".join(lines + legend))
