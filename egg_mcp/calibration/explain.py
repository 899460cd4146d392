"""Why a ceiling sits where it does, from measurements only (pure; no torch).

Issue 14 asks each ceiling to be within 10 % of its peak "or explained". An explanation here is a
product of measured factors that predicts the measured share of the peak:

    share predicted = (SM clock under load / clock the peak assumes) x (tensor pipe busy share, from ncu)

and the ceiling counts as explained when the measured share is within 10 % of that prediction. With an
ncu reading, first the cleaner test on one launch: its rate at ncu's own clock reading as a share of
the per-clock peak, against the tensor pipe's busy share of that launch (ncu_launch_share). The
clock comes from NVML during a sustained burst of the same kernel (sampler.py); its cause is named
from the same window's clocks-event reasons and power draw (power cap, thermal, or "no reason
reported"). Without NVML, without a datasheet clock or without a peak the label says which part is
missing and the ceiling stays "unexplained"; nothing is inferred.
"""

from __future__ import annotations

from typing import Any

from egg_mcp.calibration.sampler import POWER_REASONS, THERMAL_REASONS

WITHIN = 0.9
"""A ceiling at >= 90 % of its peak needs no explanation (the issue's 10 %)."""
CLOCK_BELOW = 0.98
"""A clock under 98 % of the peak's clock is a reduced clock (NVML steps are 15 MHz)."""
POWER_NEAR_LIMIT = 0.95
TENSOR_KEYS = ("mm_tf32", "mm_bf16", "mm_fp16", "mm_fp8", "mm_tf32x3", "mm_fp16x3", "mm_bf16x3")
PIPE_KEYS = (*TENSOR_KEYS, "mm_fp32_ieee")
"""Rows `calibrate --ncu` reads a pipe for: the tensor pipe, and the FMA pipe for cuBLAS's IEEE fp32 GEMM.
mm_tf32x3, mm_fp16x3 and mm_bf16x3 (plain Triton GEMMs) are on the tensor pipe too: each peak is its base
type's rate / 3 (three TF32 / fp16 / bf16 products per fp32 product), so "rate per clock vs pipe busy" is the
same test; a low busy share says the kernel, not the chip, sets that row (it is a lower bound of the path)."""


def clock_cause(load: dict[str, Any], peak_clock_mhz: float) -> str:
    """'power-limited clock 1.62 GHz (sw_power_cap; 688 of 700 W)' and the like, from one sampled window."""
    clock = float(load["median_mhz"])
    reasons = set(load.get("throttle_reasons") or ())
    power, limit = load.get("power_median_w"), load.get("power_limit_w")
    watts = f"{power:.0f} of {limit:.0f} W" if power and limit else (f"{power:.0f} W" if power else "")
    detail = "; ".join(x for x in (", ".join(sorted(reasons & (POWER_REASONS | THERMAL_REASONS))), watts) if x)
    ghz = f"{clock / 1000:.2f} GHz"
    if clock >= CLOCK_BELOW * peak_clock_mhz:
        return f"clock {ghz} (not below the {peak_clock_mhz:.0f} MHz the peak assumes)"
    if reasons & POWER_REASONS or (power and limit and power >= POWER_NEAR_LIMIT * limit):
        return f"power-limited clock {ghz}" + (f" ({detail})" if detail else "")
    if reasons & THERMAL_REASONS:
        return f"thermally limited clock {ghz}" + (f" ({detail})" if detail else "")
    return (f"clock {ghz}, below the {peak_clock_mhz:.0f} MHz the peak assumes with no clocks-event reason "
            f"reported" + (f" ({watts})" if watts else ""))


def ncu_launch_share(entry: dict[str, Any], peak: float, peak_clock_mhz: float,
                     pipe: dict[str, Any]) -> dict[str, Any] | None:
    """From ONE ncu-profiled launch (its duration and its own clock reading, sm__cycles_elapsed per second):
    the rate it reached as a share of the peak at that clock ("per_clock"), next to the tensor pipe's busy
    share of the same launch. Why: NVML's 5 ms samples of a power-capped burst are not the clock a given
    launch ran at; ncu's reading is. On the H200
    (benchmarks/results/archive/h200_2026-12-01_0f0ae24-6438ad0/calibrate_ncu_c708d43.json) per_clock and busy
    agreed within 1.5 points for tf32, bf16, fp16 and fp8. None when the reading lacks a part."""
    amount, kernel_ms, clock = entry.get("amount"), pipe.get("kernel_ms"), pipe.get("clock_mhz")
    if not (amount and kernel_ms and clock and peak and peak_clock_mhz and pipe.get("busy_pct")):
        return None
    rate = float(amount) / (float(kernel_ms) * 1e-3)
    per_clock = rate / (float(peak) * float(clock) / float(peak_clock_mhz))
    return {"rate": rate, "clock_mhz": float(clock), "per_clock": per_clock, "busy": float(pipe["busy_pct"]) / 100}


def explain(entry: dict[str, Any], peak_clock_mhz: float | None, load: dict[str, Any] | None,
            sustained_rate: float | None = None, pipe: dict[str, Any] | None = None) -> dict[str, Any]:
    """The explanation fields of one ceiling row: clock_adjusted_peak, ratio_to_clock_adjusted_peak, reason,
    explained (True / False). `entry` carries value, peak; `load` a LoadSampler summary; `sustained_rate`
    the burst's rate (same window as `load`; the best-of-N value when None); `pipe` an ncu reading
    {"busy_pct", "clock_mhz", ...} or {"error"}."""
    value, peak = entry.get("value"), entry.get("peak")
    rate = sustained_rate or value
    out: dict[str, Any] = {"clock_adjusted_peak": None, "ratio_to_clock_adjusted_peak": None}
    pipe = pipe or {}  # no reading: read as an empty one
    pipe_ok = pipe.get("busy_pct") is not None and not pipe.get("error")
    if peak and load and load.get("median_mhz") and peak_clock_mhz:
        adjusted = peak * float(load["median_mhz"]) / float(peak_clock_mhz)
        out.update(clock_adjusted_peak=adjusted, ratio_to_clock_adjusted_peak=rate / adjusted)
    if not peak:
        return {**out, "reason": "no datasheet or ncu-style peak for this unit: nothing to compare with",
                "explained": False}
    if value / peak >= WITHIN:
        return {**out, "reason": f"within 10 % of the peak ({value / peak:.0%})", "explained": True}
    if not peak_clock_mhz:
        return {**out, "reason": "unexplained: the peak's source names no clock it holds at, so the clock under "
                                 "load cannot be compared with it", "explained": False}
    if out["clock_adjusted_peak"] is None or not load:  # (set only with a load reading)
        return {**out, "reason": "unexplained: the SM clock under load is unknown (no NVML reading)",
                "explained": False}
    cause = clock_cause(load, peak_clock_mhz)
    clock_share = float(load["median_mhz"]) / float(peak_clock_mhz)
    share = rate / peak
    adj = out["ratio_to_clock_adjusted_peak"]
    launch = ncu_launch_share(entry, peak, peak_clock_mhz, pipe) if pipe_ok else None
    if launch is not None and abs(launch["per_clock"] / launch["busy"] - 1) <= 1 - WITHIN:
        out["ncu_launch"] = launch
        return {**out, "reason": (
            f"one ncu launch at its own clock {launch['clock_mhz'] / 1000:.2f} GHz ran at {launch['per_clock']:.0%} of "
            f"the peak per clock with the {pipe.get('pipe', 'tensor')} pipe {launch['busy']:.0%} busy: the chip gives "
            f"its per-clock peak "
            f"whenever the pipe is busy; the gap to the datasheet is the {cause} and the pipe's idle "
            f"{1 - launch['busy']:.0%}"), "explained": True}
    if pipe_ok and float(pipe["busy_pct"]) > 0:
        busy = float(pipe["busy_pct"]) / 100
        predicted = clock_share * busy
        text = (f"{cause} x {pipe.get('pipe', 'tensor')} pipe {busy:.0%} busy (ncu) predicts {predicted:.0%} of the "
                "peak, "
                f"measured {share:.0%}")
        if abs(share / predicted - 1) <= 1 - WITHIN:
            tail = "the rest is the kernel, not the chip" if busy < WITHIN else "the clock accounts for the gap"
            return {**out, "reason": f"{text}: {tail}", "explained": True}
        return {**out, "reason": f"unexplained: {text}", "explained": False}
    if adj >= WITHIN:
        return {**out, "reason": f"{cause}: {adj:.0%} of the peak at that clock", "explained": True}
    if pipe and pipe.get("error"):
        why = f" (ncu's tensor-pipe reading failed: {pipe['error'][:160]})"
    elif str(entry.get("key")) in PIPE_KEYS:
        why = " (no ncu pipe reading: `egg-mcp calibrate --ncu` takes one)"
    else:
        why = ""
    return {**out, "reason": f"unexplained: {cause} accounts for {clock_share:.0%}; {adj:.0%} of the peak at "
                             f"that clock{why}", "explained": False}


def explain_copy(copy: dict[str, Any], read: dict[str, Any] | None) -> dict[str, Any]:
    """DRAM copy below 90 % of the pin peak: explained by measurement when a pure read reaches >= 90 % of the
    same peak (the copy's gap is then the write stream and the read/write bus turnaround, not the DRAM)."""
    peak, value = copy.get("peak"), copy.get("value")
    if not peak:
        return {"reason": "no peak for this unit: nothing to compare with", "explained": False}
    if value / peak >= WITHIN:
        return {"reason": f"within 10 % of the peak ({value / peak:.0%})", "explained": True}
    if read and read.get("peak") and read["value"] / read["peak"] >= WITHIN:
        return {"reason": f"a pure read reaches {read['value'] / read['peak']:.0%} of the same peak: the copy's gap "
                          f"is its write stream and the read/write turnaround", "explained": True}
    return {"reason": "unexplained: neither the copy nor a pure read reaches 90 % of the peak", "explained": False}


L2_PEAK_SOURCE = ("ncu's peak for the L2 slices' SM-read path: 32 B x "
                  "lts__t_sectors_srcunit_tex_op_read.sum.per_second "
                  "/ its .pct_of_peak_sustained_elapsed, of the L2 probe's own launch under ncu (ncu's sustained peak "
                  "at "
                  "that launch's L2 clock; not a datasheet figure)")
L2_TBYTES_PEAK_SOURCE = ("ncu's peak for lts__t_bytes (bytes through the L2 slices' tag stage, all sources): "
                         "lts__t_bytes.sum.per_second / lts__t_bytes.sum.pct_of_peak_sustained_elapsed of the L2 "
                         "probe's "
                         "own launch under ncu (at that launch's clocks; not a datasheet figure; this ncu gave no "
                         "SM-read path reading)")
L2_LAYOUTS = ("on the H200, 72 layouts of the probe (block, programs per SM, warps, loads in flight) plateau at 7.84 "
              "TB/s: benchmarks/results/archive/h200_2026-12-01_b4a4599-ae198ae/l2_fabric/l2_sweep.json")
"""Why the probe's own layout is not the limit: a measurement on the H200 (cited, not re-run per GPU)."""


def add_l2_reading(row: dict[str, Any], reading: dict[str, Any] | None, dram_read: dict[str, Any] | None) -> None:
    """Put the l2_read row beside ncu's peak for the unit that carries it (`calibrate --ncu`, ncu_gemm.l2_reading):
    the L2 slices' SM-read path, or lts__t_bytes when this ncu gives no SM-read reading; then re-explain it. A
    failed reading leaves the row without a peak and says why."""
    if reading is None:
        return
    row["ncu_l2"] = reading
    sm = reading.get("sm_read") or {}
    peak, source = (sm.get("peak"), L2_PEAK_SOURCE) if sm.get("peak") else (reading.get("peak"), L2_TBYTES_PEAK_SOURCE)
    if peak and not reading.get("error"):
        row.update(peak=float(peak), peak_source=source, ratio_to_peak=row["value"] / float(peak),
                   peak_clock_mhz=None, peak_clock_source=None)
    row.update(explain_l2(row, dram_read))


def _pct(x: Any) -> str:
    return f"{float(x):.1f} %"


def _busiest(sm: dict[str, Any], others: dict[str, float]) -> str:
    """'the busiest unit of the launch (... at ...)' when the numbers read say so, else which unit was busier."""
    busy = float(sm["busy_pct"])
    seen = ", ".join(f"{name} {_pct(v)}" for name, v in others.items())
    if not others:
        return "no other unit's share read in the launch"
    busier = {n: v for n, v in others.items() if float(v) > busy}
    if busier:
        return f"not the busiest unit read: {', '.join(f'{n} {_pct(v)}' for n, v in busier.items())}"
    return f"the busiest unit of the launch (of those read: {seen})"


def explain_l2(row: dict[str, Any], dram_read: dict[str, Any] | None) -> dict[str, Any]:
    """reason / explained of the l2_read row against its ncu peak. Within 10 %: explained. With the SM-read path's
    reading, the same test as a GEMM's: the row's share of that path's peak against the busy share of the
    slices' return path (lts2xbar) in the same launch; explained when within 10 % of each other. Without a busy
    share (an older ncu): the probe's first pass from DRAM (ncu's DRAM bytes at the measured DRAM read ceiling, the
    rest at the peak) must predict the share within 10 %. Otherwise "unexplained" with the numbers."""
    reading = row.get("ncu_l2") or {}
    peak, value = row.get("peak"), row["value"]
    if not peak:
        why = f"ncu's L2 reading failed: {reading['error'][:200]}" if reading.get("error") else ("nothing to compare "
                                                                                                 "with")
        return {"reason": f"no peak figure for this unit: {why}", "explained": False}
    sm = reading.get("sm_read") or {}
    unit = "the L2 slices' SM-read path" if sm.get("peak") else "lts__t_bytes"
    share = value / peak
    if share > 1 / WITHIN:
        return {"reason": f"unexplained: {share:.0%} of ncu's peak for {unit}, more than 10 % above it (the "
                          f"probe's byte count and ncu's disagree)", "explained": False}
    if share >= WITHIN:
        return {"reason": f"within 10 % of ncu's peak for {unit} ({share:.0%})", "explained": True}
    dram_bytes, amount = reading.get("dram_read_bytes"), row.get("amount")
    if sm.get("peak") and sm.get("busy_pct"):
        return _explain_by_busy(share, float(peak), sm, reading, amount)
    fallback = (f"; {reading['sm_read_missing']}: compared with lts__t_bytes, which also counts lookups an SM read "
                f"cannot use" if reading.get("sm_read_missing") else "")
    if sm.get("peak"):
        fallback = "; ncu gave no busy share of the slices' return path (lts__lts2xbar_cycles_active)"
    seen = (f"ncu read {unit} at {float(sm.get('pct_of_peak') or reading.get('pct_of_peak') or 0):.0f} % of that "
            "peak in the profiled launch "
            f"({float(sm.get('bytes_per_s') or reading.get('bytes_per_s') or 0) / 1e12:.2f} "
            f"TB/s)")
    dram_rate = (dram_read or {}).get("value")
    if not (dram_bytes is not None and dram_rate and amount):
        return {"reason": f"unexplained: {share:.0%} of ncu's peak for {unit}; {seen}; no DRAM reading to weigh "
                          f"the first pass with{fallback}", "explained": False}
    dram_bytes = min(float(dram_bytes), float(amount))
    predicted = (float(amount) / (dram_bytes / float(dram_rate) + (float(amount) - dram_bytes) / float(peak))
                 / float(peak))
    text = (f"the first pass from DRAM ({dram_bytes / 2 ** 20:.0f} MiB per ncu, at the measured DRAM read ceiling "
            f"{float(dram_rate) / 1e12:.2f} TB/s) and the rest at ncu's peak predict {predicted:.0%} of ncu's peak for "
            f"{unit}, measured {share:.0%}")
    if abs(share / predicted - 1) <= 1 - WITHIN:
        return {"reason": f"{text}: the gap is the first pass{fallback}", "explained": True}
    return {"reason": f"unexplained: {text}; {seen}{fallback}", "explained": False}


def per_slice(sm: dict[str, Any]) -> str:
    """' (per slice A-B %)': the spread of the return path's busy share over the L2 slices, when ncu gave it."""
    if sm.get("busy_min_pct") is None or sm.get("busy_max_pct") is None:
        return ""
    return f" (per slice {float(sm['busy_min_pct']):.1f}-{float(sm['busy_max_pct']):.1f} %)"


def _explain_by_busy(share: float, peak: float, sm: dict[str, Any], reading: dict[str, Any],
                     amount: float | None) -> dict[str, Any]:
    """The GEMM rows' test for L2: the rate's share of the path's peak against the path's busy share, one launch."""
    busy = float(sm["busy_pct"]) / 100
    spread = per_slice(sm)
    clock = f" at its {float(sm['l2_clock_mhz']):.0f} MHz L2 clock" if sm.get("l2_clock_mhz") else ""
    ms = reading.get("kernel_ms")
    launch = (f"; ncu's launch itself moved {float(amount) / (float(ms) * 1e-3) / 1e12:.2f} TB/s = "
              f"{_pct(float(amount) / (float(ms) * 1e-3) / peak * 100)} of it" if amount and ms else "")
    dram = reading.get("dram_read_bytes")
    first = (f"; the first pass from DRAM ({float(dram) / 2 ** 20:.0f} MiB per ncu) is inside both the row's time "
             f"and that busy share" if dram else "")
    text = (f"{_pct(share * 100)} of ncu's peak for the L2 slices' SM-read path ({peak / 1e12:.2f} TB/s{clock})"
            f"{launch}; the slices' SM return path (lts2xbar) was {_pct(busy * 100)} busy{spread} in the same launch, "
            f"{_busiest(sm, reading.get('other_units') or {})}")
    if abs(share / busy - 1) <= 1 - WITHIN:
        return {"reason": f"{text}: the chip gives that path's peak whenever it is busy, the rest is the path's idle "
                          f"time under this load{first}; the probe's layout is not the limit ({L2_LAYOUTS})",
                "explained": True}
    return {"reason": f"unexplained: {text}; the row's share is not within 10 % of the busy share{first}",
            "explained": False}


def label(row: dict[str, Any], by_key: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """reason / explained for a row that has none yet (the matmul rows carry theirs): DRAM copy via the read,
    FLOP rates via `explain` with the clock sampled for them, anything else by its ratio alone."""
    if row.get("reason"):
        return {}
    if row["key"] == "dram_copy":
        return explain_copy(row, by_key.get("dram_read"))
    if row["key"] == "l2_read" and not row.get("peak"):
        return {"reason": "no peak figure for this unit: nothing to compare with (`egg-mcp calibrate --ncu` reads "
                          "ncu's peak for the L2 slices' SM-read path on this probe's launch)", "explained": False}
    if row.get("unit") == "FLOP/s":
        got = explain(row, row.get("peak_clock_mhz"), row.get("clock_under_load"),
                      (row.get("sustained") or {}).get("rate"), row.get("tensor_pipe"))
        return {"reason": got["reason"], "explained": got["explained"]}
    peak, value = row.get("peak"), row.get("value")
    if not peak:
        return {"reason": "no peak figure for this unit: nothing to compare with", "explained": False}
    if value / peak >= WITHIN:
        return {"reason": f"within 10 % of the peak ({value / peak:.0%})", "explained": True}
    return {"reason": f"unexplained: {value / peak:.0%} of the peak", "explained": False}


def relabel(rows: list[dict[str, Any]]) -> None:
    """Fill reason / explained on every row that has none (after all rows exist: dram_copy reads dram_read)."""
    by_key = {r["key"]: r for r in rows}
    for r in rows:
        r.update(label(r, by_key))
