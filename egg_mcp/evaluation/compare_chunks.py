"""The tolerance check of one large floating tensor, chunk by chunk (runs in the judge).

Comparing a whole output at once makes float temporaries of its full size (|got - ref|, the limit, the share):
about ten of them at their peak, which at a 6 GiB output is 60 GiB of the card that the runner and the shared
output region need. Chunked, the temporaries are those of one chunk. The result equals the whole-tensor check
(compare.compare_tensor's): the same elements are bad, the same maximum, the same evenly spaced p99 sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from egg_mcp.analysis import error_share

CHUNK_ELEMENTS = 1 << 26
"""Elements per chunk (256 MiB of fp32; about 1.5 GiB of temporaries at once): few enough chunks that launching
their kernels costs little beside the copies of a large output."""


@dataclass
class ChunkedCheck:
    """What the chunked pass found; `bad` (a bool mask of the output's shape) only when some element is bad."""

    n_bad: int = 0
    bad: torch.Tensor | None = None
    share_max: float = 0.0
    samples: list[torch.Tensor] = field(default_factory=list)

    def share(self) -> tuple[float, float]:
        """(max, p99) of |got - ref| / (atol + rtol |ref|), as `analysis.error_share` gives it whole."""
        return self.share_max, error_share.p99(torch.cat(self.samples) if self.samples else torch.zeros(1))


def applies(g: torch.Tensor, e: torch.Tensor) -> bool:
    """Chunked only where it saves memory and reads the same elements: large, real floating, both contiguous."""
    return (e.numel() > CHUNK_ELEMENTS and e.is_floating_point() and g.is_contiguous() and e.is_contiguous()
            and g.shape == e.shape)


def _chunks(g: torch.Tensor, e: torch.Tensor, dtype: torch.dtype):
    flat_g, flat_e = g.detach().reshape(-1), e.detach().reshape(-1)
    for start in range(0, flat_e.numel(), CHUNK_ELEMENTS):
        stop = min(start + CHUNK_ELEMENTS, flat_e.numel())
        yield start, flat_g[start:stop].to(dtype), flat_e[start:stop].to(dtype)


def max_abs_finite(e: torch.Tensor, dtype: torch.dtype) -> float:
    """max |e| over finite elements; inf when none is finite (compare_tensor's convention). One sync, at the end."""
    best = torch.zeros((), dtype=dtype, device=e.device)
    any_finite = torch.zeros((), dtype=torch.bool, device=e.device)
    for _, _, ec in _chunks(e, e, dtype):
        finite = torch.isfinite(ec)
        any_finite |= finite.any()
        best = torch.maximum(best, torch.where(finite, ec.abs(), 0).amax())
    return float(best) if bool(any_finite) else math.inf


class Tolerance(NamedTuple):
    """The tolerance rule on two float tensors of one shape (the whole output, or one chunk of it)."""

    bad: torch.Tensor  # |g - e| > atol + rtol |e|, or non-finite where the reference is not the same non-finite
    abs_err: torch.Tensor  # |g - e| where both are finite, else 0
    limit: torch.Tensor  # atol + rtol |e| (|e| taken as 0 where e is not finite)
    g_finite: torch.Tensor
    e_finite: torch.Tensor
    same_nonfinite: torch.Tensor  # a non-finite output passes only where the reference has the identical value


def tolerance(g: torch.Tensor, e: torch.Tensor, atol: float, rtol: float) -> Tolerance:
    """The one statement of the rule, used by the whole-tensor check (compare.py) and by the chunks here."""
    g_fin, e_fin = torch.isfinite(g), torch.isfinite(e)
    same_nonfinite = (~g_fin) & (~e_fin) & ((g == e) | (torch.isnan(g) & torch.isnan(e)))
    both = g_fin & e_fin
    abs_err = torch.where(both, (g - e).abs(), 0)
    limit = atol + rtol * torch.where(e_fin, e.abs(), 0)
    return Tolerance((abs_err > limit) | (~both & ~same_nonfinite), abs_err, limit, g_fin, e_fin, same_nonfinite)


def check(g: torch.Tensor, e: torch.Tensor, atol: float, rtol: float, sample_step: int,
          dtype: torch.dtype) -> ChunkedCheck:
    """Bad elements (|g - e| > atol + rtol |e|, or non-finite where the reference differs) and the error share.
    The counts stay on the device until the end (one sync per pass, not per chunk); the bad-element mask is made
    in a second pass, only when some element is bad."""
    found = ChunkedCheck()
    n_bad = torch.zeros((), dtype=torch.int64, device=e.device)
    share_max = torch.zeros((), dtype=dtype, device=e.device)
    for start, gc, ec in _chunks(g, e, dtype):
        rule = tolerance(gc, ec, atol, rtol)
        n_bad += rule.bad.sum()
        share = error_share.share(rule.abs_err, rule.limit)
        share_max = torch.maximum(share_max, share.amax())
        first = (-start) % sample_step  # the whole tensor's sample is share[::sample_step]
        found.samples.append(share[first::sample_step].clone())  # a view would keep the chunk's share
    found.n_bad, found.share_max = int(n_bad), float(share_max)
    if found.n_bad:
        mask = torch.zeros(e.numel(), dtype=torch.bool, device=e.device)
        for start, gc, ec in _chunks(g, e, dtype):
            mask[start:start + gc.numel()] = tolerance(gc, ec, atol, rtol).bad
        found.bad = mask.reshape(e.shape)
    return found
