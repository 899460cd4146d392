"""GEMM -> GELU -> softmax over the features (KernelBench level2/99's shape of problem): the softmax over 4096
columns damps the GEMM's error at the output, so TF32 dots can pass a 1e-4 tolerance that the GEMM alone fails."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.linear(x)
        x = torch.nn.functional.gelu(x)
        return torch.softmax(x, dim=1)


batch_size = 1024
in_features = 4096
out_features = 4096


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
