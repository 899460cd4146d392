"""start_task and generate_seeds on a machine with no GPU, and with a GPU egg-mcp has no numbers for:
the reports say so ("no GPU" / "unknown GPU <name>"), never the H200's table (issue 14)."""

import asyncio

import pytest

from egg_mcp import hardware
from egg_mcp.analysis.reference import analyze_job
from egg_mcp.contract import JobOutcome
from egg_mcp.expertise.seeds import installed_triton
from tests.workspace_fakes import FakeEvaluator, make_service


class _AnalysingEvaluator(FakeEvaluator):
    """Runs the reference analysis job in this process (the built-in softmax; a test, not the server)."""

    async def run_job(self, target, payload, *, timeout_s, uses_gpu, wrapper_argv=None):
        assert target == "egg_mcp.analysis.reference:analyze_job"
        self.jobs.append(payload)
        return JobOutcome(ok=True, result=analyze_job(payload))


@pytest.mark.parametrize("names, says", [([], "no GPU"), (["NVIDIA Zeta 9000"], "unknown GPU NVIDIA Zeta 9000")])
def test_start_task_and_seed_brief_are_honest_without_known_gpu(tmp_path, monkeypatch, names, says):
    monkeypatch.setattr(hardware, "nvml_gpu_names", lambda: list(names))
    monkeypatch.setattr(hardware, "nvml_gpu_uuids", lambda: ["GPU-zeta"] if names else [])
    ev = _AnalysingEvaluator()
    service = make_service(tmp_path / "ws", ev)
    started = asyncio.run(service.start_task("softmax"))
    assert ev.jobs and "gpu_name" not in ev.jobs[0] and ev.jobs[0]["gpu_missing"].startswith(says)
    analysis = started.analysis
    assert analysis is not None and analysis["floor"] is None
    assert says in analysis["summary"], analysis["summary"]
    text = started.model_dump_json() + asyncio.run(service.generate_seeds(started.task_id)).model_dump_json()
    assert "H200" not in text and "4.3 TB/s" not in text  # no borrowed ceilings anywhere in the replies
    seeds = asyncio.run(service.generate_seeds(started.task_id))
    assert installed_triton() in seeds.brief  # the Triton that is installed here, not a remembered one


def test_with_size_overrides_the_analysis_is_at_the_sizes_verify_times(tmp_path, monkeypatch):
    # the H200 guidance run: a batch-32 attention timed against a batch-128 floor read as "below the floor"
    monkeypatch.setattr(hardware, "nvml_gpu_names", lambda: [])
    monkeypatch.setattr(hardware, "nvml_gpu_uuids", lambda: [])
    ev = _AnalysingEvaluator()
    service = make_service(tmp_path / "ws", ev)
    full = asyncio.run(service.start_task("softmax")).analysis
    ev.jobs.clear()
    small = asyncio.run(service.start_task("softmax", size_overrides={"batch_size": 64, "dim": 256}))
    # first at the default sizes (the memory check reads it), then at the overrides: the one kept
    assert [j["size_overrides"] for j in ev.jobs] == [{}, {"batch_size": 64, "dim": 256}]
    assert small.analysis["min_bytes"] * (4096 * 8192) == pytest.approx(full["min_bytes"] * (64 * 256))
    assert any("at the size_overrides" in note for note in small.notes)
