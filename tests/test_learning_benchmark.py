"""benchmarks.learning: seeds that mean something, disjoint frozen panels, per-run files that
accumulate, and the report; smoke runs on the tiny model through the app's own CLI."""

from __future__ import annotations

import json

import pytest

from benchmarks.common import read_yaml
from benchmarks.learning import CONFIG, main
from benchmarks.learning_ranking import ranking
from benchmarks.learning_report import methods_table, pairwise_table, runs_table, verdict
from benchmarks.learning_reproduction import UNCOMPARED
from benchmarks.learning_stats import holm
from benchmarks.learning_run import SIMILARITY, TEST_PANELS, panels, run_config
from tests.conftest import require

#: The frozen ALFWorld test panel: a change to its games changes this hash (and must not happen
#: once the grid has read it).
TEST_PANEL_SHA256 = "652f5d4a74c4c3b629c7d27768b241ee7df71b4e567e17a668640b1d827e8239"


def smoke(tmp_path, *args: str) -> dict:
    require("peft", extra="lora")
    require("statsmodels", extra="dev")
    return main(["--smoke", "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "learning.json"), *args])


def compared(path) -> dict:
    return {k: v for k, v in json.loads(path.read_text()).items() if k not in UNCOMPARED}


def test_the_run_seed_reaches_every_seed_and_the_method_only_its_settings():
    base = read_yaml(CONFIG)
    cfg = run_config("scpo_lexical", 7, base)
    scpo = [cb for cb in cfg["trainer"]["callbacks"] if cb["class_path"].endswith("SCPOCallback")]
    assert cfg["seed_everything"] == cfg["data"]["seed"] == scpo[0]["init_args"]["seed"] == 7
    assert scpo[0]["init_args"]["scorer"] == "lexical" and cfg["model"]["estimator"] == "gigpo"
    plain = run_config("gigpo_similarity", 7, base)
    assert plain["model"]["estimator"] == SIMILARITY
    assert not any(cb["class_path"].endswith("SCPOCallback") for cb in plain["trainer"]["callbacks"])
    assert base["data"].get("seed") is None  # the recipe itself is left as it was


def test_alfworld_panels_are_disjoint_and_the_test_panel_is_frozen():
    got = panels(read_yaml(CONFIG))
    ids = got["ids"]
    assert [len(ids[k]) for k in ("train", "dev", "test")] == [8, 64, 128]
    assert not (set(ids["train"]) | set(ids["dev"])) & set(ids["test"]) and not set(ids["train"]) & set(ids["dev"])
    assert got["test_sha256"] == TEST_PANEL_SHA256


def test_overlapping_panels_are_refused(monkeypatch):
    cfg = read_yaml(CONFIG)
    cfg["data"].update(env="corridor", env_options={"rooms": 3}, val_split="valid", val_episodes=4)
    monkeypatch.setitem(TEST_PANELS, "corridor", {"splits": ["valid"], "start": 2, "episodes": 4})
    with pytest.raises(ValueError, match="panels dev and test share 2 games"):
        panels(cfg)


@pytest.mark.slow
def test_same_seed_twice_gives_the_same_result_file_and_a_done_run_is_skipped(tmp_path):
    smoke(tmp_path, "--methods", "scpo")
    path = tmp_path / "runs" / "scpo_seed0.json"
    first = compared(path)
    assert smoke(tmp_path, "--methods", "scpo") == {}  # same config hash: skipped
    # Again from scratch, iteration 0 measured again and checked against the shared one.
    smoke(tmp_path, "--methods", "scpo", "--force", "--no-shared-zero")
    assert compared(path) == first
    assert [v["panel"] for v in first["validations"]] == ["test", "dev", "test"]
    assert [len(it["tasks"]) for it in first["iterations"]] == [2, 2]


@pytest.mark.slow
def test_two_seeds_give_different_task_streams_and_episodes(tmp_path):
    runs = smoke(tmp_path, "--methods", "gigpo", "--seeds", "0", "1")
    a, b = runs["gigpo_seed0"], runs["gigpo_seed1"]
    assert [it["tasks"] for it in a["iterations"]] != [it["tasks"] for it in b["iterations"]]
    assert all(x["actions_sha256"] != y["actions_sha256"] for x, y in zip(a["iterations"], b["iterations"]))
    assert a["validations"][0]["actions_sha256"] != b["validations"][0]["actions_sha256"]
    assert a["panels"] == b["panels"]  # the panels do not depend on the seed
    assert a["config_sha256"] != b["config_sha256"] and a["recipe_sha256"] == b["recipe_sha256"]


@pytest.mark.slow
def test_every_grid_method_from_the_same_start_and_the_report(tmp_path):
    require("matplotlib", extra="dev")
    methods = ["grpo", "gigpo", "gigpo_similarity", "scpo", "scpo_lexical"]
    runs = smoke(tmp_path, "--methods", *methods, "--no-shared-zero")
    # Same policy, games and sampling seed: iteration 0 is the same for every method, which is what
    # lets a seed's first run measure it for all (--no-shared-zero checked each against it).
    zero = [run["validations"][0] for run in runs.values()]
    assert all(z == zero[0] for z in zero) and zero[0]["panel"] == "test"
    for name, run in runs.items():
        assert ("scpo" in run["iterations"][0]) == name.startswith("scpo")  # SCPO's stats only where it ran
        assert 0.0 <= run["iterations"][0]["groups_with_success"] <= 1.0
    result = main(["--report", "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "learning.json")])
    assert json.loads((tmp_path / "learning.json").read_text()) == json.loads(json.dumps(result))
    assert (tmp_path / "learning.png").stat().st_size > 0
    assert list(result["methods"]) == methods and len(result["pairwise"]) == 10
    assert result["runs"]["gigpo_seed0"]["iterations"][1]["tasks"] == runs["gigpo_seed0"]["iterations"][1]["tasks"]
    for table, rows in ((runs_table, 5), (methods_table, 5), (pairwise_table, 10)):
        assert len(table(result).splitlines()) == rows + 2
    assert len(verdict(result).splitlines()) == 5 + 10  # each method against its start, each pair
    # SCPO vs GiGPO is the primary comparison, unadjusted; the other 9 pairs are Holm-adjusted together.
    primary = result["pairwise"].pop("scpo vs gigpo")
    assert primary["family"] == "primary, unadjusted" and primary["p_adjusted"] == primary["p_cmh"]
    assert {t["family"] for t in result["pairwise"].values()} == {"secondary, Holm over 9 pairs"}
    assert [t["p_adjusted"] for t in result["pairwise"].values()] == holm([t["p_cmh"] for t in result["pairwise"].values()])
    # One seed: no test across seeds, and so nothing of it to adjust.
    assert all(t["across_seeds"] is None and t["p_seeds_adjusted"] is None for t in result["pairwise"].values())
    # A run of another recipe in the folder is refused, never mixed in.
    stale = tmp_path / "runs" / "grpo_seed0.json"
    stale.write_text(json.dumps({**json.loads(stale.read_text()), "recipe_sha256": "older"}))
    with pytest.raises(ValueError, match="runs of 2 recipes"):
        main(["--report", "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "learning.json")])


def test_the_verdict_names_the_direction_at_alpha_and_says_when_it_is_an_interim_look():
    def test(diff: float, p: float, seeds: int, a: str = "gigpo", b: str = "scpo", holm: float = 0.0,
             p_seeds: float = 0.01, holm_seeds: float = 0.02) -> dict:
        across = None if seeds == 1 else {"p": p_seeds, "df": seeds - 1}
        return {"a": a, "b": b, "seeds": seeds, "difference": diff, "difference_ci95": [diff - 0.1, diff + 0.1],
                "p_cmh": p, "across_seeds": across, "family": "secondary, Holm over 3 pairs" if holm else
                "primary, unadjusted", "p_adjusted": holm or p, "p_seeds_adjusted": holm_seeds if holm else p_seeds}
    result = {"planned_seeds": {"gigpo": 5, "scpo": 5, "grpo": 3}, "iterations": 12,
              "vs_iteration_0": {"gigpo": test(0.2, 1e-5, 5), "grpo": test(-0.1, 0.01, 3, p_seeds=0.2),
                                 "scpo_buffer": test(0.0, 0.5, 1), "scpo": test(0.1, 0.001, 1)},
              "pairwise": {"scpo vs gigpo": test(0.03, 0.16, 4),
                           "gigpo vs grpo": test(-0.08, 0.01, 3, "grpo", "gigpo", holm=0.02),
                           "scpo vs grpo": test(0.05, 0.03, 3, "grpo", "scpo", holm=0.06),
                           "scpo_lexical vs grpo": test(0.05, 0.01, 3, "grpo", "scpo_lexical", holm=0.02,
                                                        p_seeds=0.04, holm_seeds=0.08)}}
    lines = verdict(result).splitlines()
    # Both tests below alpha: the change is stated.
    assert lines[0] == ("- **gigpo** at iteration 12 against its iteration 0: improved, +0.200 [+0.100, +0.300] "
                        "in test success, CMH p < 1e-4; across seeds p = 0.01 (4 df) (5 seeds, as planned).")
    # The games say so, the seeds do not: not stated as a change of the method.
    assert lines[1].startswith("- **grpo** at iteration 12 against its iteration 0: got worse on these runs' test "
                               "games, not established across seeds, -0.100")
    assert lines[1].endswith("CMH p = 0.01; across seeds p = 0.20 (2 df) (3 seeds, as planned).")
    assert "no detectable change" in lines[2] and "(1 seeds; not a method of the grid)" in lines[2]
    assert "improved on one seed's games (no test across seeds), +0.100" in lines[3]
    assert lines[4].startswith("- **scpo against gigpo** at iteration 12: no detectable difference between scpo and "
                               "gigpo, scpo - gigpo = +0.030") and lines[4].endswith(
        "CMH p = 0.16; across seeds p = 0.01 (3 df) (the primary comparison, unadjusted; "
        "4 of 5 planned seeds: an interim look).")
    # Holm's p < alpha on both, b behind a: a is ahead; the pair is planned at the smaller seed count.
    assert "grpo ahead of gigpo, gigpo - grpo = -0.080" in lines[5] and lines[5].endswith(
        "Holm-adjusted CMH p = 0.02, across seeds p = 0.02 (secondary, Holm over 3 pairs; 3 seeds, as planned).")
    # Secondary pairs are decided on Holm's p: 0.03 unadjusted, 0.06 adjusted -> no detectable difference.
    assert "no detectable difference between scpo and grpo" in lines[6] and "Holm-adjusted CMH p = 0.06" in lines[6]
    # ... on both tests: across seeds 0.04 unadjusted but 0.08 adjusted -> not established.
    assert "scpo_lexical ahead of grpo on these runs' test games, not established across seeds" in lines[7]


def test_the_ranking_orders_the_means_and_names_only_what_both_tests_establish():
    def method(mean: float, se: float | None, n: int) -> dict:
        return {"seeds": list(range(n)), "checkpoints": [{"mean": 0.2}, {"n": n, "mean": mean, "se": se}]}

    def test(diff: float, p: float, p_seeds: float | None, a: str = "", b: str = "") -> dict:
        return {"a": a, "b": b, "difference": diff, "difference_ci95": [diff - 0.1, diff + 0.1], "p_cmh": p,
                "across_seeds": None if p_seeds is None else {"p": p_seeds}, "p_adjusted": p, "p_seeds_adjusted": p_seeds}
    # 5 + 5 + 3 planned and all in (gigpo's sixth seed is not a planned run; scpo_lexical is not in the grid).
    result = {"iterations": 12, "planned_seeds": {"gigpo": 5, "scpo": 5, "grpo": 3},
              "methods": {"grpo": method(0.3, 0.02, 3), "gigpo": method(0.4, 0.05, 6),
                          "scpo": method(0.4, 0.04, 5), "scpo_lexical": method(0.45, None, 1)},
              "vs_iteration_0": {"grpo": test(0.1, 0.01, 0.2), "gigpo": test(0.2, 1e-5, 0.01),
                                 "scpo": test(0.2, 1e-5, 0.03), "scpo_lexical": test(0.25, 1e-3, None)},
              # grpo behind gigpo on both (adjusted) tests; scpo ahead of grpo on the games only.
              "pairwise": {"scpo vs gigpo": test(0.0, 1.0, 1.0, "gigpo", "scpo"),
                           "gigpo vs grpo": test(0.1, 0.01, 0.02, "grpo", "gigpo"),
                           "scpo vs grpo": test(0.1, 0.01, 0.3, "grpo", "scpo")}}
    # Means in descending order, ties (gigpo, scpo at 0.4) in the tables' method order; grpo's gain
    # and scpo_lexical's (one seed, no test across seeds) are not established.
    assert ranking(result) == (
        "**Ranking** (13 of 13 planned runs: the grid is complete) by mean test success at iteration 12 "
        "(± SE over each method's seeds; pairs are tested on the seeds they share): scpo_lexical 0.450 (1 seed), "
        "gigpo 0.400 ± 0.050 (6 seeds), scpo 0.400 ± 0.040 (5 seeds), "
        "grpo 0.300 ± 0.020 (3 seeds). Established at α = 0.05 by both tests (Holm-adjusted for the secondary pairs): "
        "a gain over iteration 0 for gigpo, scpo; between methods, gigpo ahead of grpo (+0.100). The primary "
        "comparison, scpo against gigpo: +0.000 [-0.100, +0.100], CMH p 1.00, across seeds p 1.00. No other step "
        "of this order is established at this α.")
    result["methods"]["grpo"]["seeds"] = [0, 1]
    assert ranking(result).startswith("**Ranking** (12 of 13 planned runs: an interim look) by mean")


@pytest.mark.slow
def test_smoke_run_of_the_buffer_and_dynamic_sampling_methods(tmp_path):
    runs = smoke(tmp_path, "--methods", "scpo_buffer", "gigpo_dynamic")
    assert sorted(runs) == ["gigpo_dynamic_seed0", "scpo_buffer_seed0"]
    assert runs["scpo_buffer_seed0"]["settings"]["scpo"] == {"reference_source": "both"}
    for it in runs["scpo_buffer_seed0"]["iterations"]:  # the buffer's stats where it ran, no sampling counts
        assert {"groups_with_buffer_reference", "buffer_size", "buffer_hit_rate"} <= set(it["scpo"])
        assert "sampling" not in it
    for it in runs["gigpo_dynamic_seed0"]["iterations"]:  # no SCPO; dynamic sampling's counts
        assert "scpo" not in it
        s = it["sampling"]
        assert s["groups_dropped"] == s["groups_collected"] - s["groups_kept"] and s["retries"] <= 2
