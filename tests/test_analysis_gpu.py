"""On a CUDA machine: the real-tensor fallback traces on the GPU, and the roofline floor is a floor
(no measured eager run of a built-in problem beats it by more than the timing noise)."""

from __future__ import annotations

import pytest
import torch

from egg_mcp.analysis.reference import analyze_job
from egg_mcp.problems.builtin import builtin_source

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

DATA_DEPENDENT = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        k = int((x > 0).sum().item())  # data-dependent: impossible on meta tensors
        return torch.relu(x) * (k > 0)

n = 2048

def get_inputs():
    return [torch.randn(n, n)]

def get_init_inputs():
    return []
'''


def test_fallback_traces_on_cuda():
    r = analyze_job({"reference_source": DATA_DEPENDENT, "dtype": "float32", "size_overrides": {}})
    assert r["traced_on"] == "cuda"
    assert r["floor"]["gpu_name"] == torch.cuda.get_device_name(0)


@pytest.mark.parametrize("name", ["softmax", "gemm_bias_relu"])
def test_floor_is_not_beaten_by_eager(name):
    import importlib.util
    import tempfile
    from pathlib import Path

    r = analyze_job({"reference_source": builtin_source(name), "dtype": "float32", "size_overrides": {},
                     "gpu_name": torch.cuda.get_device_name(0)})
    path = Path(tempfile.mkdtemp()) / f"{name}_ref.py"
    path.write_text(builtin_source(name))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs()).cuda()
    inputs = [t.cuda() for t in mod.get_inputs()]
    import triton.testing

    with torch.no_grad():
        ms = triton.testing.do_bench(lambda: model(*inputs), warmup=25, rep=200)
    assert isinstance(ms, float)  # (a list only when quantiles are asked for)
    print(f"{name}: eager {ms:.4f} ms, floor {r['floor']['floor_ms']:.4f} ms ({r['floor']['compute_type']})")
    assert r["floor"]["floor_ms"] <= ms * 1.10
