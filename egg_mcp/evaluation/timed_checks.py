"""Judge-side checks of the timed calls (trusted; pure functions of what the runner sent and the judge computed).

The runner reports, per timed call, the Triton launches it saw (kernel name and grid), and sends the outputs of
audited timed calls (timed_audit.py). The judge holds them against what it checked:

* `launch_findings`: every timed call must launch what a checked (correctness) call launched; a captured graph
  with fewer kernels than the eager call, or none, is a violation (`timed_work`);
* `audit_findings`: each audited output is compared with the judge's own reference for the seed whose contents
  the call ran on; a mismatch is a violation (`timed_output`): the kernel behaves differently while timed;
* `physical_limit_ms`: the least time a call can take to write its outputs (each output byte written once, at
  the datasheet rate of the memory level it fits in, with margin); a time below it is a violation
  (`below_physical_limit`). Reads and FLOPs are not part of this bound: a correct kernel may legitimately skip
  inputs or FLOPs the reference spends (an algebraic rewrite), so those stay the `beyond_floor` review flag.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from egg_mcp.contract import IntegrityFinding
from egg_mcp.evaluation import wire

MAX_SIGNATURES = 64
MAX_LAUNCHES_PER_CALL = 4096
PHYSICAL_MARGIN = 0.8
"""A time is below the physical limit when under this share of it. The bandwidth is the datasheet lead of
`hardware.spec_for` (an achievable copy rate, ~90 % of the datasheet peak on the H200): 0.8 x 4.3 TB/s of writes
is already beyond the H200's 4.8 TB/s peak, so no honest kernel writes its outputs that fast."""
L2_WRITE_FACTOR = 4.0
"""Outputs that fit in L2 are bounded by L2_WRITE_FACTOR x the DRAM rate (no datasheet gives an L2 write rate;
the H200's measured L2 read path is ~2.1x its DRAM peak, so 4x is generous)."""


def signature(value: Any) -> tuple | None:
    """A runner-sent launch list [[name, [grid...]], ...] as a sorted tuple, or None when malformed."""
    if not isinstance(value, list) or len(value) > MAX_LAUNCHES_PER_CALL:
        return None
    out = []
    for item in value:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], list)
                and len(item[1]) <= 3 and all(isinstance(g, int) and not isinstance(g, bool) for g in item[1])):
            return None
        out.append((item[0][:200], tuple(item[1])))
    return tuple(sorted(out))


def _describe(sig: tuple) -> str:
    if not sig:
        return "no kernel"
    counts: dict[tuple, int] = {}
    for item in sig:
        counts[item] = counts.get(item, 0) + 1
    return ", ".join(f"{name}{list(grid)}" + (f" x{n}" if n > 1 else "") for (name, grid),
                     n in list(counts.items())[:6])


def launch_findings(checked: set[tuple], timed_calls: Any) -> tuple[list[IntegrityFinding], str | None]:
    """(findings, protocol error). Each timed call's launches must equal those of some checked call."""
    if not isinstance(timed_calls, list) or len(timed_calls) > MAX_SIGNATURES:
        return [], "timed_calls is not a list of at most 64 entries"
    if not checked:
        return [], None
    bad: list[tuple[tuple, int]] = []
    total = 0
    for entry in timed_calls:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], int)):
            return [], "a timed_calls entry is not [launches, count]"
        sig = signature(entry[0])
        if sig is None:
            return [], "a timed call's launch list is malformed"
        total += entry[1]
        if sig not in checked:
            bad.append((sig, entry[1]))
    if not bad:
        return [], None
    n_bad = sum(n for _, n in bad)
    example = min(checked, key=len)
    detail = (f"the kernel behaves differently while timed: {n_bad} of {total} timed calls launched "
              f"{_describe(bad[0][0])} where every checked call launched {_describe(example)}")
    return [IntegrityFinding(check="timed_work", severity="violation", detail=detail)], None


def isolated_findings(checked: set[tuple], per_kernel_ms: dict[str, float]) -> list[IntegrityFinding]:
    """The isolated reading's kernels come from the GPU's own records (CUPTI): each Triton kernel a checked call
    launched must appear among them, or the calls timed there did other work."""
    expected = {name for sig in checked for name, _ in sig}
    seen = list(per_kernel_ms)
    missing = sorted(name for name in expected if not any(name in k for k in seen))
    if not missing or not checked:
        return []
    return [IntegrityFinding(check="timed_work", severity="violation", detail=(
        f"the kernel behaves differently while timed: the GPU ran none of {', '.join(missing[:4])} in the calls "
        f"timed from a clean L2 (it ran {', '.join(seen[:4]) or 'no kernel'}), though every checked call launched "
        "them"))]


def leaves(value: Any) -> list:
    """The reference's output flattened as the judge compares it (wire.flatten_output), as timed_audit keeps it."""
    from egg_mcp.evaluation.wire import flatten_output

    return [leaf for _, leaf in flatten_output(value, strict=True)[1]]


def audit_findings(audited: Any, values: list, expected_for_seed: Callable[[int], list],
                   compare: Callable[[torch.Tensor, torch.Tensor], str | None]
                   ) -> tuple[list[IntegrityFinding], str | None]:
    """(findings, protocol error). `compare(got, expected)` returns None or a short description of the mismatch."""
    if not isinstance(audited, list) or len(audited) > 64:
        return [], "audited is not a list of at most 64 calls"
    pos = 0
    for call in audited:
        if not (isinstance(call, dict) and isinstance(call.get("seed"), int) and isinstance(call.get("leaves"), list)):
            return [], "an audited call is malformed"
        expected = leaves(expected_for_seed(call["seed"]))
        where = str(call.get("where", "a timed call"))[:80]
        if len(call["leaves"]) != len(expected):
            return [_timed_output(where, f"returned {len(call['leaves'])} output(s), the reference "
                                         f"{len(expected)}")], None
        for i, (leaf, exp) in enumerate(zip(call["leaves"], expected)):
            kind = leaf.get("kind") if isinstance(leaf, dict) else None
            if kind == "whole":
                if pos >= len(values):
                    return [], "audited values are missing"
                got, pos = values[pos], pos + 1
                problem = _compare_leaf(got, exp, compare)
            elif kind == "sample":
                if pos >= len(values):
                    return [], "audited sample values are missing"
                got, pos = values[pos], pos + 1
                offset, stride = leaf.get("offset"), leaf.get("stride")
                if not (isinstance(exp, torch.Tensor) and isinstance(got, torch.Tensor) and got.dim() == 1
                        and type(offset) is int and type(stride) is int and 0 <= offset < stride):
                    return [], "an audited sample is malformed"
                if list(leaf.get("shape", [])) != list(exp.shape):
                    problem = f"shape {leaf.get('shape')} instead of {list(exp.shape)}"
                elif got.numel() != len(range(offset, exp.numel(), stride)) or got.numel() == 0:
                    return [], "an audited sample does not match its offset and stride"
                else:
                    problem = _compare_leaf(got, exp.reshape(-1)[offset::stride], compare)
            elif kind == "scalar":
                if pos >= len(values):
                    return [], "audited values are missing"
                got, pos = values[pos], pos + 1
                problem = None if _same_scalar(got, exp) else f"{got!r} instead of {exp!r}"
            else:
                return [], "an audited leaf has an unknown kind"
            if problem is not None:
                return [_timed_output(where, f"output leaf {i}: {problem}")], None
        expected, exp, got = [], None, None  # freed before the next call's reference (6 GiB each at large sizes)
    return [], None


def _same_scalar(got: Any, exp: Any) -> bool:
    if isinstance(exp, float) and isinstance(got, (int, float)):
        return abs(got - exp) <= 1e-6 * max(1.0, abs(exp))
    return type(got) is type(exp) and got == exp


def _compare_leaf(got: Any, exp: Any, compare) -> str | None:
    if isinstance(exp, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"a {type(got).__name__} where the reference has a tensor"
        return compare(got.to(exp.device), exp)
    return None if _same_scalar(got, exp) else f"{got!r} instead of {exp!r}"


def _timed_output(where: str, problem: str) -> IntegrityFinding:
    return IntegrityFinding(check="timed_output", severity="violation", detail=(
        f"the kernel behaves differently while timed: the output of {where} does not match the reference for "
        f"that call's inputs ({problem[:300]}); checked calls were right, so the timed calls did other work "
        "(returned an earlier output, skipped work when captured into a CUDA graph or called back to back)"))


def dram_peak_bytes_per_s(device_name: str) -> float | None:
    """The GPU's DRAM rate from the one table of GPU leads (hardware.py); None for an unknown GPU or the CPU."""
    from egg_mcp.hardware import spec_for

    spec = spec_for(device_name) if device_name != "cpu" else None
    return spec.dram_bytes_per_s if spec is not None and spec.dram_bytes_per_s > 0 else None


def physical_limit_ms(output_bytes: int, l2_bytes: int, dram_peak: float | None) -> float | None:
    """The least time one call can take to write `output_bytes` (see the module doc); None without a peak."""
    if not dram_peak or output_bytes <= 0:
        return None
    peak = dram_peak * (L2_WRITE_FACTOR if output_bytes <= l2_bytes else 1.0)
    return output_bytes / peak * 1e3


def physical_findings(median_ms: float, limit_ms: float | None, output_bytes: int, what: str) -> list[IntegrityFinding]:
    if limit_ms is None or median_ms >= PHYSICAL_MARGIN * limit_ms:
        return []
    return [IntegrityFinding(check="below_physical_limit", severity="violation", detail=(
        f"{median_ms * 1e3:.2f} us per call is below the physical limit {limit_ms * 1e3:.2f} us of writing its "
        f"{output_bytes / 1e6:.1f} MB of outputs once at {what} (margin {PHYSICAL_MARGIN:.0%}): the timed calls "
        "cannot have done the work"))]


def trial_rules(atol: float, rtol: float) -> Callable[[torch.Tensor, torch.Tensor], str | None]:
    """The correctness trials' comparison (compare_outputs: vacuous atol scaled) as audit_findings wants it."""
    from egg_mcp.evaluation.compare import compare_outputs

    def compare(got: torch.Tensor, exp: torch.Tensor) -> str | None:
        mismatch = compare_outputs(got, exp, atol, rtol)
        return None if mismatch is None else mismatch.hint[:300]

    return compare


def check_in_process(audit: Any, expected_for_seed: Callable[[int], Any], atol: float, rtol: float) -> str | None:
    """The audit of an advisory timing job (compare rounds, tiling trials: the reference runs in the same worker,
    so this decides no verdict): None, or the sentence that says the candidate behaved differently while timed."""
    calls, flat = audit.wire_values()
    findings, error = audit_findings(calls, flat, expected_for_seed, trial_rules(atol, rtol))
    if error is not None:
        return f"the audit of the timed calls failed: {error}"
    return findings[0].detail if findings else None


def timed_call_findings(message: dict[str, Any], blobs: list, stats: Any, seeds: set[int], checked: set[tuple],
                        expected_for_seed: Callable[[int], Any], compare, output_bytes: int,
                        ) -> tuple[list[IntegrityFinding], int, str | None]:
    """The judge's reading of a `timing` answer: the timed calls' launches against the checked calls', the audited
    calls' outputs against the reference, and each reading against the physical limit. (findings, calls audited,
    a protocol error or None)."""
    findings, error = launch_findings(checked, message.get("timed_calls"))
    if error is not None:
        return [], 0, error
    try:
        values = wire.decode_values(message.get("values"), blobs)
    except wire.WireError as exc:
        return [], 0, str(exc)
    audited = message.get("audited")
    if isinstance(audited, list) and any(not isinstance(c, dict) or c.get("seed") not in seeds for c in audited):
        return [], 0, "an audited call names a seed the judge never sent"
    more, error = audit_findings(audited, values, expected_for_seed, compare)
    if error is not None:
        return [], 0, error
    findings += more
    props = torch.cuda.get_device_properties(torch.cuda.current_device())  # timing runs only on a GPU
    limit = physical_limit_ms(output_bytes, int(getattr(props, "L2_cache_size", 0) or 0),
                              dram_peak_bytes_per_s(props.name))
    what = f"the {props.name}'s DRAM rate (hardware.py's lead)"
    for reading_ms in (stats.median_ms, stats.isolated.median_ms if stats.isolated is not None else None):
        if reading_ms is not None:
            findings += physical_findings(reading_ms, limit, output_bytes, what)
    if stats.isolated is not None and all(sig for sig in checked):
        # every checked call launched a Triton kernel: the GPU's own records must show them
        findings += isolated_findings(checked, stats.isolated.per_kernel_ms)
    return findings, len(audited) if isinstance(audited, list) else 0, None
