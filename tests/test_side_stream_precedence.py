"""Wrong outputs from a kernel on a side stream: on the GPU that kernel races the output copy, so a trial comes
out wrong before the integrity report after the trials could name the side stream (H200:
`incorrect` at trial 4/5 for tests/adversarial/gpu_side_stream.py). The judge's `incorrect` path asks for the
report with its static checks; a side stream found there wins. Other static findings do not change the verdict
of wrong outputs (a kernel-less candidate returning zeros stays `incorrect`)."""

from __future__ import annotations

import pytest

from egg_mcp.contract import IntegrityFinding, MismatchReport
from egg_mcp.evaluation.judge_verdicts import Verdicts


class _Judge(Verdicts):
    def __init__(self, static: list[str], earlier: list[str] | tuple[str, ...] = ()):
        self.findings = [IntegrityFinding(check=c, severity="violation", detail=c) for c in earlier]
        self.trials_run, self.trials_passed, self.kernels, self.torch_ops = 4, 3, [], []
        self.static, self.asked = static, []

    def _report(self, forwards: int, check: bool) -> None:
        self.asked.append(check)
        if check:
            self.findings += [IntegrityFinding(check=c, severity="violation", detail=c) for c in self.static]


MISMATCH = MismatchReport(output_index=0, max_abs_error=7.45e-9, fraction_mismatched=0.001,
                          hint="part of the output is not covered by the grid/mask")


@pytest.mark.parametrize("static,earlier,verdict", [
    (["side_stream"], [], "integrity_violation"),
    (["no_triton_kernel"], [], "incorrect"),
    (["torch_compute"], [], "incorrect"),
    ([], ["output_alias"], "integrity_violation"),  # found during the trials: as before
    ([], [], "incorrect"),
])
def test_a_side_stream_explains_wrong_outputs(static, earlier, verdict):
    judge = _Judge(static, earlier)
    result = judge._incorrect(MISMATCH, "on correctness trial 4/5", 4)
    assert judge.asked == [True] and result["verdict"] == verdict
    assert result["mismatch"]["max_abs_error"] == pytest.approx(7.45e-9)  # the mismatch stays in the record
    if verdict == "integrity_violation" and static:
        assert "side_stream" in result["summary"]
