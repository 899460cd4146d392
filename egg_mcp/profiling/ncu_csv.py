"""Parsing Nsight Compute's CSV output (`ncu --csv --page raw` or `--page details`).

ncu's CSV is friendlier to spreadsheets than to programs: numbers carry thousands separators
("45,344"), the raw page puts a units row under the header, fields are quoted, missing values are
"n/a", values are scaled to human units ("Kbyte", "usecond") unless `--print-units base`, and
without `--log-file` the CSV is interleaved with `==PROF==` lines and the program's own output.
Everything here is a pure function of the text so each of those cases is a unit test.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Sequence

from pydantic import BaseModel, Field

# Columns of the raw page that describe the launch rather than hold a metric.
_LAUNCH_COLUMNS = {
    "ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time", "Context", "Stream",
    "Block Size", "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value",
    "Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type", "Estimated Speedup",
}
_MISSING = {"", "n/a", "N/A", "na", "-", "--", "nan", "NaN", "(none)"}

_US_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d+)?$")
_EU_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(\.\d{3}){2,}(,\d+)?$")
_SI = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_TIME_NS = {"second": 1e9, "msecond": 1e6, "usecond": 1e3, "nsecond": 1.0, "s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}
_SCALABLE = {"byte", "sector", "request", "inst", "warp", "cycle", "block", "thread", "hz", "Hz", "register",
             "wavefront"}


class NcuValue(BaseModel):
    """One metric reading, converted to base units (bytes, nanoseconds, counts, %)."""

    raw: str
    value: float | None
    unit: str = ""


class NcuLaunch(BaseModel):
    """One profiled kernel launch (one `ID` in ncu's output)."""

    id: int
    kernel_name: str
    block_size: str = ""
    grid_size: str = ""
    device: str = ""
    cc: str = ""
    metrics: dict[str, NcuValue] = Field(default_factory=dict)

    def value(self, name: str) -> float | None:
        reading = self.metrics.get(name)
        return reading.value if reading is not None else None


class NcuRule(BaseModel):
    """A rule hint from the details page (ncu's own guidance, e.g. 'UncoalescedGlobalAccess')."""

    launch_id: int
    kernel_name: str
    section: str = ""
    rule: str
    type: str = ""
    description: str
    estimated_speedup_pct: float | None = None


class NcuLog(BaseModel):
    launches: list[NcuLaunch] = Field(default_factory=list)
    rules: list[NcuRule] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list, description="==ERROR== lines")
    warnings: list[str] = Field(default_factory=list, description="==WARNING== lines")


def parse_number(text: str | None) -> float | None:
    """A number as ncu prints it: '45,344' -> 45344.0, '1,234.5' -> 1234.5, 'n/a' -> None.

    Only unambiguous thousands groupings are read as such; a lone comma ('0,5') is read as a
    decimal comma (a European locale), since ncu never prints a thousands separator without
    at least one full group of three digits."""
    if text is None:
        return None
    s = text.strip().strip('"').strip()
    if s in _MISSING:
        return None
    if _US_THOUSANDS.match(s):
        s = s.replace(",", "")
    elif _EU_THOUSANDS.match(s):
        s = s.replace(".", "").replace(",", ".")
    elif re.match(r"^[+-]?\d+,\d+$", s):
        s = s.replace(",", ".")
    try:
        return float(s)
    except ValueError:
        return None


def to_base_unit(value: float | None, unit: str) -> tuple[float | None, str]:
    """Undo ncu's auto scaling: (1.5, 'Kbyte') -> (1500.0, 'byte'); (2, 'usecond') -> (2000.0, 'nsecond').

    ncu scales by powers of 1000 (SI), also in rate units such as 'Gbyte/second'."""
    unit = (unit or "").strip()
    if not unit:
        return value, unit
    numerator, slash, denominator = unit.partition("/")
    factor = 1.0
    if numerator in _TIME_NS and not slash:
        return (None if value is None else value * _TIME_NS[numerator]), "nsecond"
    if len(numerator) > 1 and numerator[0] in _SI and numerator[1:] in _SCALABLE:
        factor = _SI[numerator[0]]
        numerator = numerator[1:]
    if denominator in _TIME_NS and denominator not in ("second", "s"):
        # rates per msecond/usecond/nsecond -> per second
        factor *= 1e9 / _TIME_NS[denominator]
        denominator = "second"
    base = numerator + (slash + denominator if slash else "")
    return (None if value is None else value * factor), base


def short_kernel_name(name: str) -> str:
    """'void my_kernel<128>(float*, int)' -> 'my_kernel'; Triton names pass through unchanged."""
    s = name.strip()
    if s.startswith("void "):
        s = s[5:]
    s = s.split("(", 1)[0]
    s = s.split("<", 1)[0]
    return s.strip()


def _csv_rows(text: str) -> list[list[str]]:
    """The CSV records of ncu output mixed with other lines: ncu quotes every field, so a CSV
    record is a line that starts with a double quote; `==PROF==` lines and program output are
    dropped."""
    lines = [ln for ln in text.splitlines() if ln.lstrip().startswith('"')]
    return [row for row in csv.reader(lines) if row]


def _prof_lines(text: str, tag: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.lstrip().startswith(tag)]


def _find_header(rows: list[list[str]]) -> int | None:
    for i, row in enumerate(rows):
        if "ID" in row and "Kernel Name" in row:
            return i
    return None


def _launch_id(text: str) -> int | None:
    value = parse_number(text)
    return int(value) if value is not None else None


def parse_raw_page(text: str) -> list[NcuLaunch]:
    """Launches from `--page raw` CSV: a header of metric names, a units row, one row per launch."""
    rows = _csv_rows(text)
    start = _find_header(rows)
    if start is None:
        return []
    header = rows[start]
    col = {name: i for i, name in enumerate(header)}
    if "Metric Name" in col:
        return parse_details_page(text)[0]
    metric_cols = [i for i, name in enumerate(header) if name not in _LAUNCH_COLUMNS]
    units = [""] * len(header)
    launches: list[NcuLaunch] = []
    for row in rows[start + 1:]:
        if row == header:  # a second report appended to the same log
            continue
        if len(row) != len(header):
            continue  # program output that happened to start with a quote
        launch_id = _launch_id(row[col["ID"]])
        if launch_id is None:
            units = row  # the units row (its ID field is empty)
            continue
        launch = NcuLaunch(
            id=launch_id,
            kernel_name=row[col["Kernel Name"]],
            block_size=row[col["Block Size"]] if "Block Size" in col else "",
            grid_size=row[col["Grid Size"]] if "Grid Size" in col else "",
            device=row[col["Device"]] if "Device" in col else "",
            cc=row[col["CC"]] if "CC" in col else "",
        )
        for i in metric_cols:
            value, unit = to_base_unit(parse_number(row[i]), units[i])
            launch.metrics[header[i]] = NcuValue(raw=row[i], value=value, unit=unit)
        launches.append(launch)
    return launches


def parse_details_page(text: str) -> tuple[list[NcuLaunch], list[NcuRule]]:
    """Launches and rule hints from `--page details` CSV (one row per metric or per rule)."""
    rows = _csv_rows(text)
    start = _find_header(rows)
    if start is None:
        return [], []
    header = rows[start]
    col = {name: i for i, name in enumerate(header)}

    def get(row: list[str], name: str) -> str:
        i = col.get(name)
        return row[i] if i is not None and i < len(row) else ""

    by_id: dict[int, NcuLaunch] = {}
    rules: list[NcuRule] = []
    for row in rows[start + 1:]:
        # real ncu 2025.3 metric rows stop after "Metric Value" (the rule columns are left off, not
        # emptied): pad short rows, skip repeated headers and rows longer than the header
        if row == header or len(row) > len(header):
            continue
        row = row + [""] * (len(header) - len(row))
        launch_id = _launch_id(get(row, "ID"))
        if launch_id is None:
            continue
        launch = by_id.get(launch_id)
        if launch is None:
            launch = by_id[launch_id] = NcuLaunch(
                id=launch_id, kernel_name=get(row, "Kernel Name"), block_size=get(row, "Block Size"),
                grid_size=get(row, "Grid Size"), device=get(row, "Device"), cc=get(row, "CC"),
            )
        metric = get(row, "Metric Name")
        if metric:
            value, unit = to_base_unit(parse_number(get(row, "Metric Value")), get(row, "Metric Unit"))
            launch.metrics[metric] = NcuValue(raw=get(row, "Metric Value"), value=value, unit=unit)
        rule = get(row, "Rule Name")
        description = get(row, "Rule Description")
        if rule and description and not any(r.launch_id == launch_id and r.rule == rule for r in rules):
            rules.append(NcuRule(
                launch_id=launch_id, kernel_name=launch.kernel_name, section=get(row, "Section Name"),
                rule=rule, type=get(row, "Rule Type"), description=description,
                estimated_speedup_pct=parse_number(get(row, "Estimated Speedup")),
            ))
    return list(by_id.values()), rules


def parse_ncu_output(text: str) -> NcuLog:
    """Everything in one ncu log: launches (raw or details page), rule hints, errors, warnings."""
    rows = _csv_rows(text)
    start = _find_header(rows)
    log = NcuLog(errors=_prof_lines(text, "==ERROR=="), warnings=_prof_lines(text, "==WARNING=="))
    if start is None:
        return log
    if "Metric Name" in rows[start]:
        log.launches, log.rules = parse_details_page(text)
    else:
        log.launches = parse_raw_page(text)
    return log


# --- diagnosing a run that produced no numbers -------------------------------------------------

COUNTER_PERMISSION_HELP = (
    "the GPU performance counters are restricted to admin users (ERR_NVGPUCTRPERM): run as root, or "
    "set the nvidia kernel module option NVreg_RestrictProfilingToAdminUsers=0 "
    "(https://developer.nvidia.com/ERR_NVGPUCTRPERM)"
)


def counter_access_problem(text: str) -> str | None:
    """Why ncu could not read counters at all, in words a user can act on; None if it could."""
    if "ERR_NVGPUCTRPERM" in text or "permission to access NVIDIA GPU Performance Counters" in text:
        return COUNTER_PERMISSION_HELP
    if "LibraryNotLoaded" in text:
        return "ncu could not load its CUDA/driver libraries (LibraryNotLoaded): is the NVIDIA driver installed?"
    for needle in ("No CUDA-capable device", "no CUDA-capable device", "CUDA_ERROR_NO_DEVICE", "Unsupported GPU",
                   "not supported on this device", "Device not supported"):
        if needle in text:
            return f"ncu cannot profile this GPU ({needle})"
    return None


def invalid_metrics(text: str, requested: Iterable[str]) -> list[str]:
    """Requested metric names the installed ncu rejected (named in its ==ERROR== lines)."""
    errors = [ln for ln in _prof_lines(text, "==ERROR==") if "metric" in ln.lower()]
    found: list[str] = []
    for name in requested:
        pattern = re.compile(r"(?<![\w.])" + re.escape(name) + r"(?![\w.])")
        if any(pattern.search(ln) for ln in errors) and name not in found:
            found.append(name)
    return found


def no_kernels_profiled(text: str) -> bool:
    return "No kernels were profiled" in text


def render_raw_csv(launches: list[dict[str, object]], units: dict[str, str] | None = None) -> str:
    """Write launches in ncu's `--page raw --csv` layout (header, units row, one row per launch).

    Each launch is {"ID", "Kernel Name", optional launch columns, metric -> value}; used to build
    test logs and to store a filtered copy of a real log."""
    units = units or {}
    fixed = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
             "Grid Size", "Device", "CC"]
    metric_names = list(dict.fromkeys(k for launch in launches for k in launch if k not in fixed))
    header = fixed + metric_names
    defaults = {"Process ID": "4242", "Process Name": "python3", "Host Name": "127.0.0.1", "Context": "1",
                "Stream": "7", "Block Size": "(128, 1, 1)", "Grid Size": "(1, 1, 1)", "Device": "0", "CC": "9.0"}

    def line(fields: Sequence[object]) -> str:
        return ",".join('"' + str(f).replace('"', '""') + '"' for f in fields)

    rows = [line(header), line([""] * len(fixed) + [units.get(m, "") for m in metric_names])]
    for launch in launches:
        rows.append(line([launch.get(c, defaults.get(c,
                                                     "")) for c in fixed] + [launch.get(m,
                                                                                        "n/a") for m in metric_names]))
    return "\n".join(rows) + "\n"
