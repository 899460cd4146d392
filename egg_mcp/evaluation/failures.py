"""Failure reports and environment facts shared by the judge and the runner: an exception becomes an
ErrorReport trimmed to the candidate's lines; its verdict comes from the one classifier (errors.py)."""

from __future__ import annotations

import platform
import traceback
from typing import Any

import torch

from egg_mcp.contract import EnvInfo, ErrorReport
from egg_mcp.evaluation.bounds import over_bound_note
from egg_mcp.evaluation.errors import exception_chain

# ------------------------------------------------------------------------------- environment

def env_info(interpreter: bool) -> EnvInfo:
    from importlib.metadata import PackageNotFoundError, version

    class triton:  # the version without importing triton (the judge never runs Triton code)
        try:
            __version__ = version("triton")
        except PackageNotFoundError:
            __version__ = None

    info = EnvInfo(
        device="cpu (Triton interpreter)" if interpreter else torch.cuda.get_device_name(),
        interpreter=interpreter,
        cuda=torch.version.cuda,
        torch=torch.__version__,
        triton=triton.__version__,
        python=platform.python_version(),
    )
    if not interpreter:
        try:
            import pynvml

            pynvml.nvmlInit()
            driver = pynvml.nvmlSystemGetDriverVersion()
            info.driver = driver.decode() if isinstance(driver, bytes) else driver
        except Exception:
            pass
    return info


# ------------------------------------------------------------------------------- errors

def error_report(exc: BaseException, candidate_path: str | None) -> ErrorReport:
    """The exception with its traceback trimmed to candidate frames; candidate_line = submitted line."""
    line = None
    frames_text: list[str] = []
    # Innermost exception first: its deepest candidate frame is the line to fix.
    for item in reversed(exception_chain(exc)):
        item_line = None
        for frame in traceback.extract_tb(item.__traceback__):
            if candidate_path and frame.filename == candidate_path:
                item_line = frame.lineno
                frames_text.append(f'  candidate line {frame.lineno}, in {frame.name}\n    {frame.line or ""}')
        if isinstance(item, SyntaxError) and candidate_path and item.filename == candidate_path:
            item_line = item.lineno
            frames_text.append(f"  candidate line {item.lineno}\n    {(item.text or '').rstrip()}")
        compile_line = _triton_compile_line(item)
        if compile_line is not None:
            item_line = compile_line
        if line is None:
            line = item_line
    if not frames_text:
        frames_text = [ln.rstrip() for ln in traceback.format_tb(exc.__traceback__)[-3:]]
    kind = type(exc).__name__
    bare = without_kind(str(exc), kind)
    message = f"{kind}: {bare}"
    text = "\n".join(frames_text[-8:]) + "\n" + message[:3000]
    return ErrorReport(kind=kind, message=bare[:2000] or kind, candidate_line=line, traceback=text[-6000:])


def without_kind(message: str, kind: str) -> str:
    """The message without a leading copy of the exception type ('SyntaxError: SyntaxError: x' -> 'x'):
    every renderer prints `kind: message`, so the message must not carry the kind itself."""
    prefix = f"{kind}: "
    while message.startswith(prefix):
        message = message[len(prefix):]
    return message


def _triton_compile_line(exc: BaseException) -> int | None:
    """Line in the submitted file of a Triton CompilationError (its node line is relative to the def)."""
    node = getattr(exc, "node", None)
    if node is None or not hasattr(node, "lineno"):
        return None
    tb = exc.__traceback__
    fn = None
    while tb is not None:
        candidate = tb.tb_frame.f_locals.get("fn") or tb.tb_frame.f_locals.get("self")
        if hasattr(candidate, "starting_line_number"):
            fn = candidate
        tb = tb.tb_next
    if fn is None:
        return None
    base = getattr(fn, "def_file_line_number", None) or fn.starting_line_number
    return int(base) + int(node.lineno) - 1


def _failure(verdict: str, exc: BaseException, candidate_path: str | None, when: str, **extra) -> dict[str, Any]:
    report = error_report(exc, candidate_path)
    at = f" at line {report.candidate_line}" if report.candidate_line else ""
    if isinstance(exc, SystemExit):
        report.kind = "exit"
        report.message = f"candidate code called sys.exit({exc.code!r})"
    bound = over_bound_note(exc)
    if bound is not None:  # a bound the runner set (bounds.py): named, never a plain runtime error
        verdict = "oom" if bound[0] == "oom" else "runtime_error"
        report.kind = bound[0]
        report.message = f"{bound[1]}: {report.message}"[:2000]
    advice = {
        "compile_error": "fix that line and verify again",
        "oom": "use less memory (smaller tiles or temporaries) and verify again",
        "runtime_error": "fix the error and verify again",
    }[verdict]
    if bound is not None and bound[0] != "oom":
        advice = "write less to files and start no processes from candidate code, then verify again"
    cuda_note = ""
    if "CUDA error" in report.message or "device-side assert" in report.message:
        cuda_note = " (a CUDA fault: usually an out-of-bounds pointer or a failed tl.device_assert; add masks)"
    first = without_kind(report.message, report.kind).splitlines()[0][:300] if report.message else ""
    summary = f"{when}{at}: {report.kind}: {first}{cuda_note}; {advice}."
    return {"verdict": verdict, "summary": summary, "error": report.model_dump(), **extra}
