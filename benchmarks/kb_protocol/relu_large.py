import torch
import torch.nn as nn


class Model(nn.Module):
    """y = relu(x) at KernelBench level-1 elementwise sizes (4096 x 393216 fp32 = 6.4 GB)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 4096
dim = 393216


def get_inputs():
    x = torch.rand(batch_size, dim) - 0.5
    return [x]


def get_init_inputs():
    return []
