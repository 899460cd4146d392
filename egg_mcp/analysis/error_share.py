"""The error as a share of the tolerance, |err| / (atol + rtol |ref|): one definition for verify's comparison
(`evaluation.compare`, whole or chunk by chunk) and the precision ladder's measurement at the output
(`analysis.precision_output`), so a verify's share and the ladder's share of the same error are the same number.

A share of 1.0 is the tolerance's edge. Reported as the maximum (over every element) and the 99th percentile over
an evenly spaced sample of at most `SHARE_SAMPLE` elements. Torch comes with the callers' tensors: this module
imports it only inside its functions (the server process never holds a tensor).
"""

from __future__ import annotations

import math
from typing import Any

SHARE_SAMPLE = 1 << 20
"""Elements the p99 share is taken over (evenly spaced; the max is over every element)."""


def share(abs_err: Any, limit: Any) -> Any:
    """Elementwise |err| / limit: 0 where both are 0, inf where the limit is 0 and the error is not."""
    import torch

    ratio = abs_err / limit.clamp_min(torch.finfo(limit.dtype).tiny)
    return torch.where(limit > 0, ratio, torch.where(abs_err > 0, math.inf, 0.0).to(ratio.dtype))


def sample_step(numel: int, sample: int = SHARE_SAMPLE) -> int:
    """The stride of the evenly spaced p99 sample of `numel` shares."""
    return max(1, numel // sample)


def p99(sample: Any) -> float:
    """The 99th percentile of a sample of shares (0.0 for an empty one)."""
    import torch

    flat = sample.reshape(-1).float()  # selected where it lies: a 1M sample took 32 ms a trial copied to the host
    if not flat.numel():
        return 0.0
    k = max(1, min(flat.numel(), math.ceil(0.99 * flat.numel())))
    return float(torch.kthvalue(flat, k).values)


def max_and_p99(abs_err: Any, limit: Any, sample: int = SHARE_SAMPLE) -> tuple[float, float]:
    """(max, p99) of |err| / limit over a whole tensor; (0.0, 0.0) for an empty one."""
    flat = share(abs_err, limit).reshape(-1)
    if not flat.numel():
        return 0.0, 0.0
    return float(flat.max()), p99(flat[::sample_step(flat.numel(), sample)])
