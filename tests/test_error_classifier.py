"""One error classifier (evaluation/errors.py) for verify, tiling and profiling: they cannot disagree."""

import pytest

from egg_mcp.evaluation.errors import classify, error_kind, verdict_for
from egg_mcp.tiling.trial_problem import trial_error_kind as tiling_kind


def _named(name: str, base=Exception):
    return type(name, (base,), {})


def test_out_of_resources_is_one_class_everywhere():
    exc = _named("OutOfResources")("out of resource: shared memory, Required: 262144, Hardware limit: 232448")
    assert error_kind(exc) == "out_of_resources" and tiling_kind(exc) == "out_of_resources"
    assert classify(exc) == "compile_error" == verdict_for("out_of_resources")  # verify's verdict


def test_subclass_and_chained_causes_are_seen():
    sub = _named("MyOOR", _named("OutOfResources"))("x")
    assert error_kind(sub) == "out_of_resources"
    try:
        try:
            raise _named("CompilationError")("bad tl.dot")
        except Exception as inner:
            raise RuntimeError("while launching") from inner
    except RuntimeError as outer:
        assert error_kind(outer) == "compile_error"


@pytest.mark.parametrize("name,kind", [("CompileTimeAssertionFailure", "compile_error"), ("PTXASError",
                                                                                          "compile_error"),
                                       ("OutOfMemoryError", "oom"), ("ValueError", "runtime_error")])
def test_kinds(name, kind):
    assert error_kind(_named(name)("x")) == kind


def test_interpreter_errors_wrapping_name_errors_are_compile_errors():
    try:
        try:
            raise NameError("tl.foo")
        except NameError as inner:
            raise _named("InterpreterError")("x") from inner
    except Exception as exc:
        assert classify(exc) == "compile_error"
    assert classify(MemoryError()) == "oom" and tiling_kind(MemoryError()) == "runtime_error"
