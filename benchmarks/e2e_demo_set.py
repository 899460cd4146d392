"""Write the demo's shipped kernels as a KernelBench-format bench set: OUT/problems/<problem>_<kernel>.py
(the built-in reference) and OUT/solutions/<problem>_<kernel>.py (the kernel), for `egg-mcp bench`.

    python benchmarks/e2e_demo_set.py OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from egg_mcp.e2e.demo_plan import KERNELS_DIR, PLANS  # noqa: E402
from egg_mcp.problems.builtin import builtin_source  # noqa: E402


def write_demo_set(out: Path) -> list[str]:
    names = []
    for problem in PLANS:
        reference = builtin_source(problem)
        for kernel in sorted((KERNELS_DIR / problem).glob("*.py")):
            name = f"{problem}_{kernel.stem}"
            for sub, text in (("problems", reference), ("solutions", kernel.read_text())):
                (out / sub).mkdir(parents=True, exist_ok=True)
                (out / sub / f"{name}.py").write_text(text)
            names.append(name)
    return names


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python benchmarks/e2e_demo_set.py OUT_DIR")
    for n in write_demo_set(Path(sys.argv[1])):
        print(n)
