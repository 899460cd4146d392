"""Small checks the workflow applies to stored results and client claims (pure; issue 18 point 5).

* `reuse_blocker`: a stored verify result whose timing saw a throttled GPU said "re-verify"; returning
  it from the cache on re-submission would make that advice impossible to follow, so it is re-evaluated.
  So is a verdict the machine may have caused rather than the source (`machine_caused`): a `timeout`
  (load, a throttled GPU, another job), an `oom` that the source is not shown to cause itself, a harness
  fault. The stored row stays for the history; only the cache does not answer with it.
* `evidence_mismatches`: commit_stage's `decision.evidence` is the client's claim; time-like entries
  are checked against the times this server measured. A mismatch is a recorded warning, not an error:
  the client may legitimately quote another clock (a per-kernel ncu time, a quick check), and the
  measured time is what the commit stores and the guard judges, so the claim cannot mislead the
  workflow, only the reader, whom the warning tells.
"""

from __future__ import annotations

import re
from typing import Any

EVIDENCE_REL_TOLERANCE = 0.10
"""Claimed and measured times further apart than this (relative) are reported."""


_UNIT = {"b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_SIZE = r"([0-9.]+) ?([KMGT]iB|B)\b"
_TRIED = re.compile(r"Tried to allocate " + _SIZE, re.IGNORECASE)
_TOTAL = re.compile(r"total capacity of " + _SIZE, re.IGNORECASE)
_THIS_PROCESS = re.compile(r"this process has " + _SIZE + r" memory in use", re.IGNORECASE)
_CPU_TRIED = re.compile(r"you tried to allocate (\d+) bytes", re.IGNORECASE)


def _bytes(match: re.Match | None) -> float | None:
    if match is None:
        return None
    try:
        return float(match.group(1)) * _UNIT.get(match.group(2).lower(), 1)
    except (ValueError, IndexError):
        return None


def oom_is_own(error: Any, host_memory_bytes: float | None = None) -> bool:
    """True when an out-of-memory report shows the candidate's own demand exceeds the device: PyTorch's
    CUDA OOM message names the request, the device's total capacity and what this process already holds;
    when request + held > total, no other job could have made the difference, so the source would fail
    the same way on an idle GPU. Anything else (the host's OOM killer SIGKILLing the runner, a CUDA OOM
    while other processes hold the memory, a message we cannot read) may be the machine's."""
    message = str(getattr(error, "message", "") or "")
    tried, total, held = (_bytes(_TRIED.search(message)), _bytes(_TOTAL.search(message)),
                          _bytes(_THIS_PROCESS.search(message)))
    if tried is not None and total is not None:
        return tried + (held or 0.0) > total
    cpu = _CPU_TRIED.search(message)  # DefaultCPUAllocator: the request alone against the host's memory
    if cpu is not None and host_memory_bytes:
        return float(cpu.group(1)) > host_memory_bytes
    return False


def _host_memory_bytes() -> float | None:
    try:
        import os

        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def machine_caused(result: Any) -> str | None:
    """Why this verdict may be the machine's rather than the source's (None: the source's own)."""
    if getattr(result, "fault", None) == "harness":
        return "a harness fault (egg-mcp or its environment failed, not the kernel)"
    verdict = getattr(result, "verdict", None)
    if verdict == "timeout":
        return "a timeout (the host's load, a throttled GPU or another job may have caused it)"
    if verdict == "oom" and not oom_is_own(getattr(result, "error", None), _host_memory_bytes()):
        return ("an out-of-memory end that the source is not shown to cause itself (the host's OOM killer, or "
                "memory held by other processes)")
    return None


def reuse_blocker(result: Any) -> str | None:
    """Why a stored EvalResult must not be returned for an identical source (None: reuse it)."""
    machine = machine_caused(result)
    if machine is not None:
        return f"the stored verdict may be the machine's: {machine}"
    timing = getattr(result, "timing", None)
    if timing is not None and getattr(timing, "throttled", None):
        reasons = ", ".join(getattr(timing, "throttle_reasons", []) or []) or "throttled"
        return f"the stored timing saw a throttled GPU ({reasons})"
    return None


def _is_time(metric: str) -> bool:
    m = metric.lower()
    return m.endswith("_ms") or m in ("ms", "time", "median", "time_ms", "median_ms", "runtime_ms")


def _num(v: Any) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v.strip().removesuffix("ms").strip())
        except ValueError:
            return None
    return None


def evidence_mismatches(evidence: list[Any], *, after_ms: float | None, before_ms: float | None,
                        candidate_id: str) -> list[str]:
    """Warnings for time-like evidence (`*_ms`, 'median', 'time') whose before/after disagree with the
    measured times (the committed candidate's, and the previous commit's)."""
    out = []
    for e in evidence:
        if not _is_time(e.metric):
            continue
        for side, claimed, measured, whose in (("after", e.after, after_ms, f"candidate {candidate_id}"),
                                               ("before", e.before, before_ms, "the previous commit")):
            value = _num(claimed)
            if value is None or not measured:
                continue
            if abs(value - measured) > EVIDENCE_REL_TOLERANCE * measured:
                out.append(f"decision.evidence {e.metric} {side}={claimed} does not match the {measured:.4g} ms "
                           f"measured for {whose} (more than {100 * EVIDENCE_REL_TOLERANCE:.0f}% apart); the commit "
                           "records the measured time")
    return out
