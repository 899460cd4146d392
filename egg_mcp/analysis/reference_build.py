"""Loading a reference module and building its model and inputs, for the analysis worker's measurements
(reference.py's trace and costs, precision_output.py's whole-forward error runs): one place both use, below both."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path
from typing import Any

from egg_mcp.analysis.trace import AnalysisError


def load_reference_module(source: str, size_overrides: dict[str, int | list[int]] | None = None) -> Any:
    """Write `source` to a real file (tracebacks and @triton.jit need one) and import it."""
    workdir = Path(tempfile.mkdtemp(prefix="egg_ref_"))
    name = f"egg_reference_{uuid.uuid4().hex[:8]}"
    from egg_mcp.problems.modules import import_source

    module = import_source(source, workdir / f"{name}.py", name)
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, attr):
            raise AnalysisError(
                f"the reference defines no `{attr}`; a KernelBench reference needs class Model, get_inputs() "
                "and get_init_inputs()"
            )
    if size_overrides:  # the rules every evaluation applies (ints, lists of ints; derived constants refreshed)
        from egg_mcp.problems.problem import apply_size_overrides

        try:
            apply_size_overrides(module, None, dict(size_overrides))
        except ValueError as exc:
            raise AnalysisError(str(exc)) from None
    return module


def _torch_dtype(dtype: str) -> Any:
    import torch

    table = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    if dtype not in table:
        raise AnalysisError(f"unsupported dtype {dtype!r}; use one of {', '.join(table)}")
    return table[dtype]


def build_model(module: Any, device: str, dtype: str) -> tuple[Any, list[Any]]:
    """The reference's model and one input set on `device` in `dtype` (seed 0: the analysis is deterministic)."""
    import torch

    tdtype = _torch_dtype(dtype)
    torch.manual_seed(0)
    with torch.device(device):
        init = list(module.get_init_inputs())
        model = module.Model(*init)
        inputs = list(module.get_inputs())
    model = model.to(device=device, dtype=tdtype)
    inputs = [
        (t.to(device=device, dtype=tdtype) if t.is_floating_point() else t.to(device))
        if isinstance(t, torch.Tensor) else t
        for t in inputs
    ]
    return model, inputs
