"""benchmarks/run.py: named suites; every output file says what produced it."""

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("bench_run", REPO / "benchmarks" / "run.py")
    assert spec is not None and spec.loader is not None
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


@pytest.mark.slow
def test_verify_latency_light_runs_the_persistent_path_only(tmp_path):
    run = _load()
    assert run.main(["verify_latency_light", "--quick", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "verify_latency_light.json").read_text())["result"]
    assert list(result["paths"]) == ["persistent"] and result["candidate_aa_persistent_over_oneshot"] is None
    assert result["paths"]["persistent"]["back_to_back"]["summary"]["all_correct"]


@pytest.mark.slow
def test_verify_sizes_quick_splits_each_verify_into_compile_gpu_and_overhead(tmp_path):
    """The CPU form of the sizes suite: three tasks (GEMM, softmax, ReLU) through MCP, every call correct, each
    wall split into the runner's compile, the candidate's time and the rest, with the phases kept."""
    run = _load()
    assert run.main(["verify_sizes", "--quick", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "verify_sizes.json").read_text())["result"]
    assert list(result["tasks"]) == ["gemm", "softmax_full", "relu_2gb"]
    for task in result["tasks"].values():
        summary = task["summary"]
        assert summary["n"] == 1 and summary["all_correct"], summary
        for row in task["calls"]["measured"]:
            assert not row["cached"] and row["phase_s"], row
            assert abs(row["wall_s"] - row["triton_compile_s"] - row["candidate_gpu_s_at_most"]
                       - row["overhead_s"]) < 0.002, row


def test_guidance_suite_checks_the_issue_18_rules():
    """The GPU guidance suite's checks (benchmarks/guidance_suite.py), on canned texts."""
    from benchmarks import guidance_suite as g

    reply = {"summary": "ok", "result": {"review": ["1.82 ms is below the floor 2.70 ms of the fastest admissible"]},
             "report": {"kernels": [{"verdict": "104% of the floor 7.5 ms (tf32x3 dots): at the roof: stop here"}]}}
    texts = g.floor_texts(reply)
    assert len(texts) == 2
    assert any("below the floor" in p for p in g.verdict_problems(texts, "tf32x3", "tf32x3"))
    roof_only = [texts[1]]
    assert g.verdict_problems(roof_only, "tf32x3", "tf32x3") == []  # already on the fastest admissible path
    assert g.verdict_problems(roof_only, "fp32", "tf32x3")  # an IEEE kernel "at the roof" while tf32x3 passes
    good = ["-   tf32x3: PASSES (err 6.5e-07 abs, 3.3e-07 rel; 0.043% of atol (limit 25%)); rate 35.7 TFLOP/s, "
            "measured here"]
    assert g.brief_check(good) and not g.brief_check([good[0].replace("35.7 TFLOP/s, measured here", "no GPU")])
    assert not g.brief_check([good[0].replace("PASSES", "fails")])
    v = g.variants((g.KB / "mingpt_attention_triton.py").read_text())
    assert "tf32x3" not in v["fp32"].split('"""', 2)[2] and v["fp32"].split('"""',
                                                                            2)[2].count('input_precision="ieee"') == 3
    assert {"guidance", "tiling_exhaustive"} <= set(_load().SUITES)


def test_tiling_search_reports_rho_per_case_and_overall(tmp_path):
    """benchmarks/tiling_search.py end to end with a fake engine: the multi-kernel case is probed (its GEMMs at
    K=768, its attention kernel apart), a set of configs measured, rho / pick / gain per case and overall."""
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    import tiling_search as ts

    from egg_mcp.contract import JobOutcome
    from egg_mcp.tiling.launches import probe_launches

    def fake_run_job(target, payload, timeout_s, uses_gpu):
        if target == ts.PROBE:
            return JobOutcome(ok=True, result=probe_launches(payload))
        results = [{"config": {"values": c["config"]}, "median_ms": 1.0 + 0.1 * i, "correct": True}
                   for i, c in enumerate(payload["candidates"])]  # measured in the model's order, then the sample
        return JobOutcome(ok=True, result={"results": results, "wall_s": 1.0})

    assert ts.main([str(tmp_path), "--cases", "softmax_b,kb43_attention_block", "--quick"], run_job=fake_run_job) == 0
    data = json.loads((tmp_path / "tiling_search.json").read_text())
    attn = next(c for c in data["cases"] if c["case"] == "kb43_attention_block")
    assert [k["kind"] for k in attn["kernels"]] == ["gemm", "attention", "gemm"]
    assert attn["kernels"][0]["dims"]["K"] == 768 and attn["kernels"][0]["dims_from"] == "launch"
    for case in data["cases"]:
        assert case["rho"] is not None and case["pick_over_best"] == 1.0 and case["measured_configs"] >= 10
    assert data["summary"]["with_rho"] == 2 and data["summary"]["rho_median"] is not None
    assert "| kb43_attention_block |" in (tmp_path / "tiling_search.md").read_text()
