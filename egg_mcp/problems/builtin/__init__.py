"""Built-in KernelBench-format problems shipped with the package (demo, tests, first steps).

Each module defines `Model`, `get_inputs()`, `get_init_inputs()` and module-level size constants.
`QUICK_SIZES` (optional) gives the size overrides for a fast check on the CPU interpreter.
"""

from __future__ import annotations

from importlib import resources

BUILTIN_PROBLEMS = ("softmax", "gemm_bias_relu")


def builtin_source(name: str) -> str:
    if name not in BUILTIN_PROBLEMS:
        raise KeyError(f"unknown built-in problem {name!r}; choose one of {', '.join(BUILTIN_PROBLEMS)}")
    return resources.files(__name__).joinpath(f"{name}.py").read_text()
