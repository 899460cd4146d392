"""benchmarks/tiling_rho_noise.py: how much of the tiling model's rank correlation the H200 timing noise explains
(offline, CPU: the recorded times and CVs are the H200's, only the model runs)."""

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import tiling_rho_noise as noise  # noqa: E402

from egg_mcp.tiling.kernel_calls import spearman  # noqa: E402

DATA = REPO / "tests" / "data" / "tiling_h200"
RUNS = [DATA / "tiling_search_b4a4599" / "tiling_search.json", DATA / "tiling_search_42095a3" / "tiling_search.json"]


def test_noise_tied_is_k_combined_standard_deviations():
    assert noise.noise_tied(100.0, 0.002, 100.5, 0.002)  # 0.5 apart < 2 x hypot(0.2, 0.201) ~ 0.57
    assert not noise.noise_tied(100.0, 0.002, 100.6, 0.002)
    assert noise.tied_pairs([1.0, 1.001, 2.0], [0.001, 0.001, 0.001]) == (3, 1)


def test_best_within_noise_only_moves_times_inside_their_intervals_and_never_lowers_rho():
    predicted = [1.0, 2.0, 3.0, 4.0, 5.0]
    measured = [10.0, 9.99, 10.5, 10.49, 12.0]  # two near-ties the model orders the other way
    cvs = [0.001] * 5
    best = noise.best_within_noise(predicted, measured, cvs)
    assert all(abs(b - m) <= 2 * 0.001 * m + 1e-12 for b, m in zip(best, measured))
    assert spearman(predicted, measured) < 1.0 and spearman(predicted, best) == pytest.approx(1.0)
    # pairs too far apart stay as measured: the model's error is not blamed on noise
    far = [10.0, 9.0, 12.0]
    assert noise.best_within_noise([1.0, 2.0, 3.0], far, [0.001] * 3) == far


def test_perfect_model_ceiling_falls_with_the_noise():
    times = [1.0, 1.01, 1.02, 1.03, 1.04, 1.05]
    assert noise.perfect_model_ceiling(times, [0.0] * 6) == pytest.approx(1.0)
    quiet, loud = noise.perfect_model_ceiling(times, [0.001] * 6), noise.perfect_model_ceiling(times, [0.02] * 6)
    assert quiet is not None and loud is not None
    assert 0.95 < quiet <= 1.0 and loud < quiet


@pytest.fixture(scope="module")
def result():
    return noise.run(RUNS, run_probe=lambda payload: None)


def test_the_memory_bound_cases_are_limited_by_the_model_not_by_the_noise(result):
    """rowsum_a / rowsum_b / layernorm_a read rho < 0.7 on the b4a4599 and 42095a3 runs with the model at 5ca66b1
    (rho_noise_5ca66b1.json), while a perfect model would read >= 0.98 against noise of the recorded CVs and the two
    runs order the same configs alike (rho >= 0.98): the misses were the model's. The model of 2f0d984 reads >= 0.7
    on both runs."""
    stored = json.loads((DATA / "rho_noise_5ca66b1.json").read_text())["cases"]
    cases = result["cases"]
    for name in ("rowsum_a", "rowsum_b", "layernorm_a"):
        runs = cases[name]["runs"]
        assert set(runs) == {"tiling_search_b4a4599", "tiling_search_42095a3"}
        assert cases[name]["repeat"]["rho_repeat"] > 0.98 and cases[name]["repeat"]["n"] >= 14
        for run, c in runs.items():
            assert stored[name]["runs"][run]["rho"] < 0.7 <= c["rho"] and c["ceiling_perfect_model"] > 0.98
            assert c["rho"] <= c["rho_best_within_noise"] and c["noise_tied_pairs"] <= c["pairs"]
    # rowsum_a is the near-tie case: 6-7 of 17 configs within 2 % of the best, 13-18 noise-tied pairs
    a = cases["rowsum_a"]["runs"]["tiling_search_42095a3"]
    assert a["within_2pct_of_best"] >= 6 and a["noise_tied_pairs"] >= 10


def test_recorded_noise_file_matches_a_rerun(result):
    """rho_noise_2f0d984.json (benchmarks/results/archive/tiling/) is this script's output with the current model."""
    stored = json.loads((DATA / "rho_noise_2f0d984.json").read_text())
    for name in ("rowsum_a", "layernorm_a", "rowsum_b", "biasgelu_a", "softmax_b"):
        for run, c in result["cases"][name]["runs"].items():
            s = stored["cases"][name]["runs"][run]
            assert (s["n"], s["noise_tied_pairs"]) == (c["n"], c["noise_tied_pairs"])
            assert s["rho"] == pytest.approx(c["rho"], abs=1e-9)
    assert "rho between the two runs" in noise.markdown(result)
