"""The tolerance check of one large floating tensor, chunk by chunk (runs in the judge).

Comparing a whole output at once makes float temporaries of its full size (|got - ref|, the limit, the share):
about ten of them at their peak, which at a 6 GiB output is 60 GiB of the card that the runner and the shared
output region need. Chunked, the temporaries are those of one chunk. The result equals the whole-tensor check
(compare.compare_tensor's): the same elements are bad, the same maximum, the same evenly spaced p99 sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from egg_mcp.analysis import error_share

CHUNK_ELEMENTS = 1 << 24
"""Elements per chunk (64 MiB of fp32): each temporary is this size, not the output's."""


@dataclass
class ChunkedCheck:
    """What the chunked pass found; `bad` (a bool mask of the output's shape) only when some element is bad."""

    max_abs_expected: float
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
    """max |e| over finite elements; inf when none is finite (compare_tensor's convention)."""
    best, any_finite = 0.0, False
    for _, _, ec in _chunks(e, e, dtype):
        finite = torch.isfinite(ec)
        if bool(finite.any()):
            any_finite = True
            best = max(best, float(torch.where(finite, ec.abs(), 0).max()))
    return best if any_finite else math.inf


def check(g: torch.Tensor, e: torch.Tensor, atol: float, rtol: float, max_abs: float, sample_step: int,
          dtype: torch.dtype) -> ChunkedCheck:
    """Bad elements (|g - e| > atol + rtol |e|, or non-finite where the reference differs) and the error share."""
    found = ChunkedCheck(max_abs_expected=max_abs)
    for start, gc, ec in _chunks(g, e, dtype):
        g_fin, e_fin = torch.isfinite(gc), torch.isfinite(ec)
        same_nonfinite = (~g_fin) & (~e_fin) & ((gc == ec) | (torch.isnan(gc) & torch.isnan(ec)))
        both = g_fin & e_fin
        abs_err = torch.where(both, (gc - ec).abs(), 0)
        e_abs = torch.where(e_fin, ec.abs(), 0)
        bad = (abs_err > atol + rtol * e_abs) | (~both & ~same_nonfinite)
        n_bad = int(bad.sum())
        if n_bad:
            if found.bad is None:
                found.bad = torch.zeros(e.numel(), dtype=torch.bool, device=e.device)
            found.bad[start:start + bad.numel()] = bad
            found.n_bad += n_bad
        share = error_share.share(abs_err, atol + rtol * e_abs)
        found.share_max = max(found.share_max, float(share.max()))
        first = (-start) % sample_step  # the whole tensor's sample is share[::sample_step]
        found.samples.append(share[first::sample_step].clone())  # a view would keep the chunk's share
    if found.bad is not None:
        found.bad = found.bad.reshape(e.shape)
    return found
