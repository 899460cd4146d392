"""ServerConfig.spares (EGG_MCP_SPARES): with 0 nothing is started ahead of need, neither the spare judge or worker
per mode nor any judge's next runner; the setting reaches every engine, a Ray lane's too (lanes.engine_settings)."""

from __future__ import annotations

import pytest

from egg_mcp.cluster.lanes import engine_settings
from egg_mcp.config import SPARES_VAR, ServerConfig
from egg_mcp.evaluation.engine import WorkerEvaluator
from egg_mcp.evaluation.engine_pool import JUDGE_POOL, RUNNER_POOL
from egg_mcp.evaluation.judge_host import _parse


def test_the_variable_is_read_by_the_config_and_a_bad_value_is_named(monkeypatch):
    monkeypatch.delenv(SPARES_VAR, raising=False)
    assert ServerConfig().spares is True
    monkeypatch.setenv(SPARES_VAR, "0")
    assert ServerConfig().spares is False
    monkeypatch.setenv(SPARES_VAR, "many")
    with pytest.raises(ValueError, match="EGG_MCP_SPARES='many'"):
        ServerConfig()


def test_engine_settings_carry_it_and_read_their_own_output_back():
    off = engine_settings({"spares": False})
    assert off["spare_workers"] == 0 and off["runners_ahead"] is False
    assert engine_settings(off) == off  # the gateway and Ray actors get the settings as JSON and read them again
    on = engine_settings({})
    assert on["spare_workers"] == 1 and on["runners_ahead"] is True and engine_settings(on) == on


@pytest.mark.parametrize("ahead", [True, False])
def test_judges_and_one_shot_workers_start_runners_ahead_only_when_asked(tmp_path, ahead):
    ev = WorkerEvaluator(scratch_dir=tmp_path, force_interpreter=True, protect_server_memory=False,
                         **engine_settings({"spares": ahead}))
    judge_argv = ev.pool._argv("interp" + JUDGE_POOL, [])
    worker_argv = ev.pool._argv("interp" + RUNNER_POOL, [])
    assert ("--no-runners-ahead" in judge_argv) is not ahead
    assert ("--ahead" in judge_argv) is ahead and ("--prestart-runner" in worker_argv) is ahead
    assert judge_argv[1:3] == ["-m", "egg_mcp.evaluation.judge_host"]
    args = _parse(["--job-fd", "3", "--result-fd", "4", "--mode", "interp", *judge_argv[3:]])
    assert args.runners_ahead is ahead
