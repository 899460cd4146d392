"""The one error classifier: what an exception raised by candidate code means (no torch import).

Verify (evaluation/harness.py), the tiling trials and the profiling target all classify failures
here, so they never disagree. A Triton `OutOfResources` (a config asks for more shared memory or
registers than the SM has) is a compile-time failure of that config: verify's verdict is
`compile_error`; the tiling search keeps the finer kind `out_of_resources` (it prunes such configs
and tells the model it was wrong), which `verdict_for` maps back to `compile_error`.
"""

from __future__ import annotations

from typing import Literal

ErrorKind = Literal["oom", "out_of_resources", "compile_error", "runtime_error"]

COMPILE_ERRORS = frozenset({"CompilationError", "CompileTimeAssertionFailure", "UnsupportedLanguageConstruct",
                            "PTXASError", "MLIRCompilationError"})
INTERPRETER_COMPILE_ERRORS = frozenset({"AttributeError", "NameError", "TypeError", "SyntaxError"})


def exception_chain(exc: BaseException | None) -> list[BaseException]:
    """`exc` and its causes / contexts, each once."""
    chain, seen = [], set()
    while exc is not None and id(exc) not in seen:
        chain.append(exc)
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return chain


def _names(exc: BaseException) -> set[str]:
    return {cls.__name__ for e in exception_chain(exc) for cls in type(e).__mro__}


def error_kind(exc: BaseException) -> ErrorKind:
    """The finest class of a failure: oom, out_of_resources, compile_error or runtime_error."""
    names = _names(exc)
    if isinstance(exc, MemoryError) or "OutOfMemoryError" in names:
        return "oom"
    if "OutOfResources" in names:
        return "out_of_resources"
    if names & COMPILE_ERRORS:
        return "compile_error"
    if "InterpreterError" in names and names & INTERPRETER_COMPILE_ERRORS:
        return "compile_error"
    return "runtime_error"


def verdict_for(kind: ErrorKind) -> Literal["oom", "compile_error", "runtime_error"]:
    """The evaluation verdict (see api.Verdict) of an error kind."""
    return "compile_error" if kind == "out_of_resources" else kind


def classify(exc: BaseException) -> Literal["oom", "compile_error", "runtime_error"]:
    """Verdict for an exception raised by candidate code."""
    return verdict_for(error_kind(exc))
