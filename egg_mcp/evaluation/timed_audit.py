"""Timed calls are checked calls (runner side): the timer's hooks that keep outputs of timed calls for the judge.

A candidate can recognise the timing loop (a CUDA-graph capture, a burst of back-to-back calls) and return an
earlier output without doing the work. So every timing path hands its calls to a `TimedCallAudit`:

* per-call timing (CUDA events, the isolated CUPTI reading): a few randomly placed calls plus the last one are
  audited. Before an audited call its input set is refilled *in place* with the contents of a fresh seed
  (outside the timed region), so an output cached by pointer or by object is stale; every other call's inputs get
  their version counter bumped the same way, so the refill cannot be told from the tensors' metadata;
* graph replay: after the timed replays every rotating input set is refilled in place, the graph is replayed
  once more, and the outputs of the captured calls (the last one of each set, read after that replay) are
  audited: a kernel that skips its work on later replays leaves outputs for the old contents;
* each kept output is copied right after its call (outside the timed region), so later calls cannot fix it up;
  a leaf over FULL_LEAF_BYTES is kept as a strided sample of about SAMPLE_ELEMENTS elements (every `stride`-th
  element of the flattened leaf from a random `offset`, both drawn after the call: the sample spans the whole
  output, and the copy is one strided clone, no gather kernel or index tensor that a fresh runner would first have
  to load and ship; measured cold costs in benchmarks/results/h200_2026-12-02/README.md).

The judge computes the reference for each audited seed and compares: a mismatch is `integrity_violation`
(timed_output). The audit also records which kernels each call launched (`LaunchCounter.begin_call`), so the
judge can hold the timed calls' launches against those of the checked calls (timed_work).
"""

from __future__ import annotations

import math
import random
from typing import Any, Callable

import torch

FULL_LEAF_BYTES = 16 << 20
"""Output leaves up to this size are kept whole; larger ones as a sample (a 6.4 GB softmax output would
otherwise cost a full extra transfer per audited call)."""
SAMPLE_ELEMENTS = 1 << 18
"""About this many elements per sampled leaf (the stride is drawn from [n // SAMPLE_ELEMENTS, 2x that))."""
PER_READING = 2
"""Randomly placed audited calls per per-call reading, besides its last call."""
GRAPH_SETS = 4
"""Randomly chosen input sets of a graph reading audited after the refill, besides the last set."""
MAX_KEPT = 12


def kept_bytes(leaf_bytes: int) -> int:
    """The most bytes `keep` ships for one output leaf of this size (the judge's receive limit is built from it):
    whole up to FULL_LEAF_BYTES, above that a sample of fewer than 2 x SAMPLE_ELEMENTS elements of at most 16 bytes
    (the stride is at least numel // SAMPLE_ELEMENTS)."""
    return leaf_bytes if leaf_bytes <= FULL_LEAF_BYTES else min(leaf_bytes, 2 * SAMPLE_ELEMENTS * 16)

_clone = torch.Tensor.clone
_reshape = torch.Tensor.reshape
_copy = torch.Tensor.copy_
try:
    from torch.autograd.graph import increment_version as _increment_version
except ImportError:  # pragma: no cover - older torch
    _increment_version = None


def _leaves(value: Any) -> list:
    """The output's leaves in the order the judge walks the reference's (wire.flatten_output)."""
    from egg_mcp.evaluation.wire import flatten_output

    return [leaf for _, leaf in flatten_output(value)[1]]


class TimedCallAudit:
    """Plans audited positions, refills their inputs, keeps their outputs; `kept` goes to the judge."""

    def __init__(self, fresh_inputs: Callable[[int], list], audit_seeds: list[int],
                 rng: random.Random | None = None):
        self.fresh_inputs = fresh_inputs
        self.audit_seeds = list(audit_seeds)
        self.rng = rng or random.SystemRandom()
        self.kept: list[dict[str, Any]] = []
        self.positions: set[int] = set()
        self.pending: dict[int, int | None] = {}  # audited call -> the seed its inputs were refilled from
        self.set_seed: dict[int, int] = {}
        self.label = ""

    def _next_seed(self) -> int | None:
        return self.audit_seeds.pop() if self.audit_seeds else None

    def _refill(self, inputs: list) -> int | None:
        """New contents for one input set, in place (the same tensors, so the candidate sees the same pointers)."""
        seed = self._next_seed()
        if seed is None:
            return None
        for old, new in zip(inputs, self.fresh_inputs(seed)):
            if isinstance(old, torch.Tensor) and isinstance(new, torch.Tensor) and old.shape == new.shape:
                _copy(old, new)
        return seed

    @staticmethod
    def _touch(inputs: list) -> None:
        if _increment_version is None:
            return
        for x in inputs:
            if isinstance(x, torch.Tensor):
                _increment_version(x)

    # -- per-call readings --------------------------------------------------------------------
    def plan(self, n_calls: int, label: str, per_reading: int = PER_READING) -> None:
        """Audit `per_reading` random calls and the last one of a reading of n_calls."""
        self.label = label
        self.pending = {}
        if len(self.kept) >= MAX_KEPT or n_calls <= 0:
            self.positions = set()
            return
        others = self.rng.sample(range(n_calls - 1), min(per_reading, max(0, n_calls - 1)))
        self.positions = {n_calls - 1, *others}

    def before(self, index: int, inputs: list) -> None:
        """Called before the call's L2 flush (outside the timed region)."""
        if index in self.positions:
            self.pending[index] = self._refill(inputs)
        else:
            self._touch(inputs)

    def after(self, index: int, out: Any) -> None:
        """Called after the call's end event was recorded: the copy runs after the timed region."""
        if index not in self.positions:
            return
        seed = self.pending.pop(index, None)
        if seed is not None:
            self.keep(seed, out, f"{self.label} call {index + 1}")

    def fresh_set(self) -> tuple[int | None, list]:
        """(seed, a new input set) for a call that runs on inputs of its own (the isolated reading: refilling
        there would put the copy into a timed group). The timer's own sets may have been refilled already, so
        their seeds are not known here."""
        seed = self._next_seed()
        return seed, self.fresh_inputs(seed if seed is not None else 0)

    # -- graph readings ------------------------------------------------------------------------
    def refill_sets(self, sets: list[list]) -> None:
        """Every rotating set gets fresh contents in place before the graph's audit replay."""
        self.set_seed = {}
        for k, inputs in enumerate(sets):
            seed = self._refill(inputs)
            if seed is not None:
                self.set_seed[k] = seed

    def keep_graph(self, outputs: dict[int, Any], label: str) -> None:
        """Outputs of the captured calls (last per set), read after the audit replay."""
        sets = sorted(k for k in outputs if k in self.set_seed)
        if not sets:
            return
        chosen = {sets[-1], *self.rng.sample(sets[:-1], min(GRAPH_SETS, len(sets) - 1))}
        for k in sorted(chosen):
            self.keep(self.set_seed[k], outputs[k], f"{label} set {k + 1}/{len(outputs)} after a replay")

    # -- keeping ---------------------------------------------------------------------------------
    def keep(self, seed: int | None, out: Any, where: str) -> None:
        if seed is None or len(self.kept) >= MAX_KEPT:  # no seed left: nothing the judge could compare it with
            return
        values = []
        for leaf in _leaves(out):
            if isinstance(leaf, torch.Tensor) and leaf.numel() * leaf.element_size() > FULL_LEAF_BYTES:
                stride = self._stride(leaf)
                offset = self.rng.randrange(stride)
                values.append({"sample_of": list(leaf.shape), "offset": offset, "stride": stride,
                               "values": _clone(_reshape(leaf.detach(), -1)[offset::stride])})
            elif isinstance(leaf, torch.Tensor):
                values.append({"whole": _clone(leaf.detach())})
            elif leaf is None or isinstance(leaf, (bool, int, float, complex, str)):
                values.append({"scalar": leaf})
            else:  # something wire cannot carry (an Opaque part of a hostile output): the judge sees a mismatch
                values.append({"scalar": f"<{type(leaf).__name__}>"})
        self.kept.append({"seed": int(seed), "where": where, "values": values})

    def _stride(self, leaf: torch.Tensor) -> int:
        """A random stride in [n // SAMPLE_ELEMENTS, twice that), coprime with every dimension where one is found:
        a stride that is a multiple of the row length would sample a single column."""
        base = max(1, leaf.numel() // SAMPLE_ELEMENTS)
        stride = self.rng.randrange(base, 2 * base)
        for _ in range(64):
            if all(math.gcd(stride, int(d)) == 1 for d in leaf.shape if d > 1):
                break
            stride = self.rng.randrange(base, 2 * base)
        return stride

    def wire_values(self) -> tuple[list[dict[str, Any]], list]:
        """(per audited call: seed, where, leaf kinds) and the flat list of values to encode."""
        calls, flat = [], []
        for item in self.kept:
            leaves = []
            for v in item["values"]:
                if "sample_of" in v:
                    leaves.append({"kind": "sample", "shape": v["sample_of"], "offset": v["offset"],
                                   "stride": v["stride"]})
                    flat.append(v["values"])
                elif "whole" in v:
                    leaves.append({"kind": "whole"})
                    flat.append(v["whole"])
                else:
                    leaves.append({"kind": "scalar"})
                    flat.append(v["scalar"])
            calls.append({"seed": item["seed"], "where": item["where"], "leaves": leaves})
        return calls, flat
