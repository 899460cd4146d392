import torch
import torch.nn as nn


class Model(nn.Module):
    """Row-wise softmax over the last dimension: y = softmax(x, dim=1)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


batch_size = 4096
dim = 8192

# Size overrides for a fast correctness pass on the CPU interpreter.
QUICK_SIZES = {"batch_size": 8, "dim": 100}


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
