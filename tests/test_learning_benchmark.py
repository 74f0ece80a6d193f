"""benchmarks.learning: its interval arithmetic against published values, and a smoke run of the
whole comparison (three methods through the app's own CLI) on the tiny model."""

from __future__ import annotations

import json

import pytest

from benchmarks.learning import main
from benchmarks.learning_report import newcombe, table, wilson
from tests.conftest import require


def test_wilson_interval_matches_hand_computation():
    # 5/10, z = 1.96: centre (0.5 + z²/20) / (1 + z²/10) = 0.5; half-width
    # z·sqrt(0.025 + z²/400) / (1 + z²/10) = 1.96 · 0.18602 / 1.38415 = 0.26341 -> [0.2366, 0.7634].
    low, high = wilson(5, 10)
    assert low == pytest.approx(0.236593, abs=1e-6) and high == pytest.approx(0.763407, abs=1e-6)
    # 0/10 keeps its lower end at 0 and its upper end at z² / (n + z²) = 3.8415 / 13.8415 = 0.27753.
    assert wilson(0, 10) == pytest.approx((0.0, 0.277533), abs=1e-6)
    assert wilson(10, 10)[1] == pytest.approx(1.0) and wilson(0, 0) == (0.0, 1.0)


def test_newcombe_difference_matches_his_worked_example():
    # Newcombe (1998), Statistics in Medicine 17:873, his worked example 56/70 vs 48/80:
    # difference 0.2, method 10 (hybrid score) interval [0.0524, 0.3339].
    low, high = newcombe(48, 80, 56, 70)
    assert low == pytest.approx(0.0524, abs=5e-5) and high == pytest.approx(0.3339, abs=5e-5)
    # No change: an interval symmetric around 0.
    low, high = newcombe(20, 64, 20, 64)
    assert low == pytest.approx(-high) and low < 0 < high


@pytest.mark.slow
def test_smoke_run_trains_every_method_from_the_same_start(tmp_path):
    require("peft", extra="lora")
    require("matplotlib", extra="dev")
    out = tmp_path / "learning.json"
    result = main(["--smoke", "--no-shared-zero", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert (tmp_path / "learning.png").stat().st_size > 0
    runs = result["runs"]
    assert sorted(runs) == ["gigpo_seed0", "grpo_seed0", "scpo_seed0"]
    # Same policy, games and sampling seed: iteration 0 is the same for every method, which is
    # what lets the published run measure it once per seed.
    zero = [run["validations"][0]["outcomes"] for run in runs.values()]
    assert zero[0] == zero[1] == zero[2] and len(zero[0]) == 4
    for name, run in runs.items():
        assert [v["iteration"] for v in run["validations"]] == [0, 1, 2]
        assert [it["iteration"] for it in run["iterations"]] == [1, 2]
        assert ("scpo" in run["iterations"][0]) == (name == "scpo_seed0")  # SCPO's stats only where it ran
        summary = result["summary"][name]
        assert summary["change_ci95"][0] <= summary["change"] <= summary["change_ci95"][1]
    # The docs' table: a header, a rule, a row per run with its three validations and SCPO's credit
    # only where SCPO ran.
    rows = table(result).splitlines()
    assert len(rows) == 5 and rows[0].count("| iteration ") == 3
    credit = {row.split(" | ")[0][2:]: row.split(" | ")[6] for row in rows[2:]}
    assert credit["gigpo_seed0"] == credit["grpo_seed0"] == "–" and credit["scpo_seed0"].count(" / ") == 1


@pytest.mark.slow
def test_smoke_run_of_the_buffer_and_dynamic_sampling_methods(tmp_path):
    require("peft", extra="lora")
    require("matplotlib", extra="dev")
    result = main(["--smoke", "--methods", "scpo_buffer", "gigpo_dynamic", "--out", str(tmp_path / "learning.json")])
    runs = result["runs"]
    assert sorted(runs) == ["gigpo_dynamic_seed0", "scpo_buffer_seed0"]
    assert runs["gigpo_dynamic_seed0"]["iteration_0_shared"]  # validation does not depend on the method
    assert result["method_settings"]["scpo_buffer"]["scpo"] == {"reference_source": "both"}
    for it in runs["scpo_buffer_seed0"]["iterations"]:  # the buffer's stats where it ran, no sampling counts
        assert {"groups_with_buffer_reference", "buffer_size", "buffer_hit_rate"} <= set(it["scpo"])
        assert "sampling" not in it
    for it in runs["gigpo_dynamic_seed0"]["iterations"]:  # no SCPO; dynamic sampling's counts
        assert "scpo" not in it
        s = it["sampling"]
        assert s["groups_dropped"] == s["groups_collected"] - s["groups_kept"] and s["retries"] <= 2
