"""benchmarks/run.py: named suites; every output file says what produced it."""

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("bench_run", REPO / "benchmarks" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_suites_are_named_and_listed(capsys):
    run = _load()
    assert {"calibrate", "tiling_agreement", "tiling_search"} <= set(run.SUITES)
    assert run.main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in run.SUITES)
    assert run.main(["nope", "--out", "/tmp/x"]) == 2


def test_each_output_carries_commit_versions_and_gpu(tmp_path, monkeypatch):
    run = _load()
    monkeypatch.setitem(run.SUITES, "fake", lambda out, quick: {"quick": quick, "value": 1.5})
    monkeypatch.setitem(run.SUITES, "broken", lambda out, quick: 1 / 0)
    assert run.main(["fake", "broken", "--out", str(tmp_path), "--quick"]) == 1
    record = json.loads((tmp_path / "fake.json").read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    prov = record["provenance"]
    assert record["result"] == {"quick": True, "value": 1.5} and prov["git_commit"] == head
    assert prov["torch"] and prov["triton"] and "gpus" in prov and prov["started_at"]
    assert "ZeroDivisionError" in json.loads((tmp_path / "broken.json").read_text())["error"]


@pytest.mark.slow
def test_verify_latency_quick_runs_both_judge_paths_through_mcp(tmp_path):
    """The CPU form of the GPU suite (interpreter, 32x32): every call correct, both paths measured in one
    run, every second of the engine's share in a phase, and the persistent path reusing its judge."""
    run = _load()
    assert run.main(["verify_latency", "--quick", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "verify_latency.json").read_text())["result"]
    for path in ("oneshot", "persistent"):
        for series, n in (("back_to_back", 2), ("think", 1)):
            summary = result["paths"][path][series]["summary"]
            assert summary["n"] == n and summary["all_correct"], summary
            assert summary["p50_wall_s"] > 0 and summary["max_abs_unaccounted_s"] < 0.05, summary
    calls = [c for s in ("back_to_back", "think") for c in result["paths"]["persistent"][s]["calls"]]
    assert all(c["judge"]["persistent"] and c["judge"]["reference"] == "held" for c in calls), calls
    assert len({c["judge"]["pid"] for c in calls}) == 1
    oneshot = [c for s in ("back_to_back", "think") for c in result["paths"]["oneshot"][s]["calls"]]
    assert len({c["judge"]["pid"] for c in oneshot}) == len(oneshot)
