"""benchmarks/run.py: named suites; every output file says what produced it."""

import importlib.util
import json
import subprocess
from pathlib import Path

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
