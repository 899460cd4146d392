"""A started runner that dies before `ready` ran no candidate code: the judge replaces it once (CI saw a spare die
under load and the honest candidate got a harness fault); a second death is still the harness's fault."""

import pytest

from egg_mcp.contract import ErrorReport, EvalOptions
from egg_mcp.evaluation import judge as judge_mod
from egg_mcp.evaluation.runner_process import RunnerGone


class _Runner:
    made: list = []

    def __init__(self, mode, workdir=None, dies=False):
        self.mode, self.dies, self.killed, self.warmup = mode, dies, False, {}
        _Runner.made.append(self)

    def wait_ready(self):
        if self.dies:
            raise RunnerGone(ErrorReport(kind="oom", message="the candidate's runner process was killed (SIGKILL)"))

    def kill(self):
        self.killed = True


def _judge():
    payload = {"options": EvalOptions().model_dump(mode="json"), "seeds": [1, 2, 3], "init_seed": 7}
    return judge_mod.Judge(payload)


def test_a_runner_dead_before_ready_is_replaced_once(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(judge_mod, "take", lambda mode: _Runner(mode))
    j = _judge()
    dead = _Runner("interp", dies=True)
    j.runner = dead  # pyright: ignore[reportAttributeAccessIssue]  # a stand-in runner
    j._ask_ready()
    assert dead.killed and j.runner is not dead and j.runner.mode == "interp"
    assert "died before it was ready" in j.judge_info["runner_replaced"]


def test_a_second_death_is_a_harness_fault(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(judge_mod, "take", lambda mode: _Runner(mode, dies=True))
    j = _judge()
    j.runner = _Runner("interp", dies=True)  # pyright: ignore[reportAttributeAccessIssue]  # a stand-in runner
    with pytest.raises(judge_mod.Rejected) as err:
        j._ask_ready()
    assert err.value.result["fault"] == "harness" and "did not start" in err.value.result["summary"]
