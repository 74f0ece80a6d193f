"""benchmarks.learning_stats: hand-checkable cases of its intervals and paired tests."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("statsmodels", reason="the dev extra: pip install -e '.[dev]'")

from benchmarks.learning_stats import across_seeds, fmt_p, holm, mcnemar_exact, mean_se, paired, wilson  # noqa: E402


def test_wilson_interval_matches_hand_computation():
    # 5/10, z = 1.96: centre (0.5 + z²/20) / (1 + z²/10) = 0.5; half-width
    # z·sqrt(0.025 + z²/400) / (1 + z²/10) = 1.96 · 0.18602 / 1.38415 = 0.26341 -> [0.2366, 0.7634].
    assert wilson(5, 10) == pytest.approx((0.236593, 0.763407), abs=1e-6)
    # 0/10 keeps its lower end at 0 and its upper end at z² / (n + z²) = 3.8415 / 13.8415 = 0.27753.
    assert wilson(0, 10) == pytest.approx((0.0, 0.277533), abs=1e-6)
    assert wilson(0, 0) == (0.0, 1.0)


def test_mean_and_standard_error_over_seeds():
    # 0.2, 0.4, 0.6: mean 0.4, sample sd 0.2, SE 0.2 / sqrt(3) = 0.11547.
    got = mean_se([0.2, 0.4, 0.6])
    assert got["n"] == 3 and got["mean"] == pytest.approx(0.4) and got["se"] == pytest.approx(0.2 / math.sqrt(3))
    assert mean_se([0.5]) == {"n": 1, "mean": 0.5, "se": None}


def outcomes(won: list[int]) -> dict[str, bool]:
    return {f"game{i}": bool(w) for i, w in enumerate(won)}


def test_exact_mcnemar_counts_the_games_only_one_side_won():
    # 8 discordant games, 1 won only by a and 7 only by b: two-sided exact p =
    # 2 · P(X <= 1 | Bin(8, 1/2)) = 2 · (1 + 8) / 256 = 0.0703125. 10 won by both, 22 by neither.
    a = outcomes([1] * 10 + [1] + [0] * 7 + [0] * 22)
    b = outcomes([1] * 10 + [0] + [1] * 7 + [0] * 22)
    got = mcnemar_exact(a, b)
    assert (got["games"], got["won_a"], got["won_b"], got["only_a"], got["only_b"]) == (40, 11, 17, 1, 7)
    assert got["p_exact"] == pytest.approx(18 / 256)
    assert mcnemar_exact(a, a)["p_exact"] == 1.0
    with pytest.raises(ValueError, match="share no task"):
        mcnemar_exact(a, {"other": True})


def test_pooled_cmh_is_mcnemars_chi_square_on_the_pooled_discordant_games():
    # Seed 1: 1 vs 7 discordant games; seed 2: 2 vs 6. Pooled b - c = 13 - 3 = 10 over 16 discordant:
    # chi² = (13 - 3)² / 16 = 6.25, p = P(chi²_1 > 6.25) = erfc(sqrt(6.25 / 2)) = 0.012419.
    a1, b1 = outcomes([1] + [0] * 7 + [1] * 4 + [0] * 8), outcomes([0] + [1] * 7 + [1] * 4 + [0] * 8)
    a2, b2 = outcomes([1] * 2 + [0] * 6 + [0] * 12), outcomes([0] * 2 + [1] * 6 + [0] * 12)
    got = paired([a1, a2], [b1, b2])
    assert got["p_cmh"] == pytest.approx(math.erfc(math.sqrt(6.25 / 2)), rel=1e-9)
    assert (got["only_a"], got["only_b"], got["games"], got["seeds"]) == (3, 13, 40, 2)
    # Difference in success: (13 - 3) / 40 = 0.25, inside its interval; the MH odds ratio of
    # matched pairs is only_b / only_a = 13 / 3.
    assert got["difference"] == pytest.approx(0.25)
    assert got["difference_ci95"][0] < 0.25 < got["difference_ci95"][1]
    assert got["odds_ratio"] == pytest.approx(13 / 3)
    assert got["odds_ratio_ci95"][0] < 13 / 3 < got["odds_ratio_ci95"][1]
    assert [s["only_b"] for s in got["per_seed"]] == [7, 6]
    # Across seeds: seed 1 wins 5 -> 11 of 20 (+0.30), seed 2 2 -> 6 of 20 (+0.20). Mean 0.25, sd
    # 0.0707, se 0.05, t = 5 on 1 df (Cauchy): p = 1 - 2 atan(5) / pi = 0.1257 -- far weaker than
    # the CMH's 0.012, which counts the 16 discordant games as independent.
    seeds = got["across_seeds"]
    assert seeds["differences"] == pytest.approx([0.3, 0.2]) and seeds["df"] == 1
    assert seeds["p"] == pytest.approx(1 - 2 * math.atan(5) / math.pi, rel=1e-9)
    # No discordant game: no evidence, p = 1.
    same = paired([a1], [a1])
    assert same["p_cmh"] == 1.0 and same["difference"] == 0.0 and same["odds_ratio"] is None
    with pytest.raises(ValueError, match="seeds"):
        paired([a1], [b1, b2])


def test_across_seeds_is_a_one_sample_t_test_of_the_per_seed_differences():
    # d = [0.1, 0.3]: mean 0.2, sd sqrt((0.01 + 0.01) / 1) = 0.1414, se 0.1, t = 2 on 1 df:
    # p = 1 - 2 atan(2) / pi = 0.2952; interval 0.2 -+ t_0.975,1 * 0.1, t_0.975,1 = tan(0.475 pi).
    got = across_seeds([0.1, 0.3])
    assert got["mean"] == pytest.approx(0.2) and got["p"] == pytest.approx(1 - 2 * math.atan(2) / math.pi, rel=1e-9)
    half = math.tan(0.475 * math.pi) * 0.1
    assert got["ci95"] == pytest.approx([0.2 - half, 0.2 + half], rel=1e-9)
    assert across_seeds([0.1]) is None  # one seed: nothing to test across
    assert across_seeds([0.0, 0.0])["p"] == 1.0 and across_seeds([0.1, 0.1])["p"] is None


def test_holm_adjusts_a_family_of_p_values_in_the_order_given():
    # Sorted 0.01 < 0.03 < 0.04, times 3, 2, 1: 0.03, 0.06, 0.04; made non-decreasing in that
    # order: 0.03, 0.06, 0.06; back in the given order [0.01, 0.04, 0.03] -> [0.03, 0.06, 0.06].
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # 0.5 * 2 = 1.0, then max(1.0, 0.9 * 1) = 1.0
    assert holm([0.07]) == [0.07] and holm([]) == []


def test_p_values_print_with_two_significant_digits():
    assert [fmt_p(p) for p in (0.72, 0.061, 0.00031, 3e-6)] == ["0.72", "0.06", "0.00031", "< 1e-4"]
