"""The semantic prefix table and the monotonic credit matcher (SPEC §3.5-3.6, paper Alg. 2)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scpo_lightning.scpo import credit_path, monotonic_credit, semantic_prefix_table


def symbols(ref: str, failed: str, hit: float = 1.0, miss: float = 0.0):
    """M (ref × failed) and M* (ref × ref) for symbolic steps: equal symbols score ``hit``."""
    M = np.array([[hit if r == f else miss for f in failed] for r in ref])
    M_star = np.array([[hit if a == b else miss for b in ref] for a in ref])
    return M, M_star


def test_prefix_table_is_the_classical_one_for_exact_matches():
    # Pattern "ABABC": pi = [0, 0, 1, 2, 0] (the textbook KMP prefix function).
    _, M_star = symbols("ABABC", "")
    assert semantic_prefix_table(M_star, 0.6).tolist() == [0, 0, 1, 2, 0]


def test_prefix_table_reads_ref_sim_as_earlier_then_later():
    # "a matches b" is M*[a, b] >= θ with a the earlier (prefix) position. Only M*[0, 1] is high:
    # q = 1, k = 0: match(0, 1) -> pi[1] = 1. With only M*[1, 0] high, pi[1] = 0.
    upper = np.array([[1.0, 0.9], [0.1, 1.0]])
    assert semantic_prefix_table(upper, 0.6).tolist() == [0, 1]
    assert semantic_prefix_table(upper.T, 0.6).tolist() == [0, 0]


def test_identity_chronological_credits_first_m_steps():
    # SPEC property: M = identity, chronological, ℓ >= m -> steps 0..m-1 get exactly 1.
    r = monotonic_credit(np.eye(4, 6), np.eye(4), theta=0.6, lam=0.4)
    np.testing.assert_array_equal(r, [1, 1, 1, 1, 0, 0])


def test_kmp_backtracking_when_the_failure_repeats_a_prefix():
    # Reference A B A C (pi = [0, 0, 1, 0]); failed sibling A B A B A C, chronological.
    # v0 A: j -1 -> 0, new frontier, credit 1.   v1 B: j -> 1, credit 1.   v2 A: j -> 2, credit 1.
    # v3 B: M[3, 3] (C vs B) < θ -> j = next(2) = pi[2] - 1 = 0; M[1, 3] (B vs B) >= θ -> j = 1,
    #       not beyond j_max = 2 -> no credit.
    # v4 A: j -> 2, not beyond 2 -> no credit.   v5 C: j -> 3 > 2 -> credit 1; j = m-1 -> stop.
    M, M_star = symbols("ABAC", "ABABAC")
    r, pos = credit_path(M, M_star, 0.6, 0.4)
    np.testing.assert_array_equal(r, [1, 1, 1, 0, 0, 1])
    np.testing.assert_array_equal(pos, [0, 1, 2, -1, -1, 3])


def test_soft_credit_value():
    # One reference step, M = 0.7, λ = 0.4: r = (0.7 - 0.4) / (1 - 0.4) = 0.5. M = 0.55 < θ: 0.
    np.testing.assert_allclose(monotonic_credit([[0.7, 0.55]], [[1.0]], 0.6, 0.4), [0.5, 0.0])
    # λ = 0: r = M itself.
    np.testing.assert_allclose(monotonic_credit([[0.7]], [[1.0]], 0.6, 0.0), [0.7])


def test_order_decides_which_step_claims_a_position():
    # Reference A B; failed steps A(v0) A(v1) B(v2), M(A, v1) = 0.9 but M(A, v0) = 0.7.
    # Chronological: v0 claims position 0 ((0.7-0.4)/0.6 = 0.5), v1 re-matches it: 0; v2 B: 1.
    # Order (1, 0, 2): v1 claims it ((0.9-0.4)/0.6 = 5/6); v0 gets nothing; v2 still 1.
    M = np.array([[0.7, 0.9, 0.0], [0.0, 0.0, 1.0]])
    M_star = np.eye(2)
    np.testing.assert_allclose(monotonic_credit(M, M_star, 0.6, 0.4), [0.5, 0.0, 1.0])
    np.testing.assert_allclose(monotonic_credit(M, M_star, 0.6, 0.4, order=[1, 0, 2]), [0.0, 5 / 6, 1.0])


def test_non_monotonic_ablation_credits_repeats():
    # Reference A B C; failed A B A B (C never reached, so no early stop).
    # Monotonic: A(0) B(1) credited; v2 A: M[2,2] < θ -> j = next(1) = pi[1]-1 = -1, then A
    # matches position 0 again: 0 <= j_max = 1 -> nothing; v3 B -> position 1 again: nothing.
    # Ablation: every advance earns credit -> all four steps get 1.
    M, M_star = symbols("ABC", "ABAB")
    np.testing.assert_array_equal(monotonic_credit(M, M_star, 0.6, 0.4), [1, 1, 0, 0])
    np.testing.assert_array_equal(monotonic_credit(M, M_star, 0.6, 0.4, monotonic=False), [1, 1, 1, 1])


def test_theta_above_every_score_gives_nothing_and_empty_inputs():
    rng = np.random.default_rng(0)
    M, M_star = rng.uniform(0, 0.59, (5, 7)), rng.uniform(0, 0.59, (5, 5))
    assert not monotonic_credit(M, M_star, 0.6, 0.4).any()
    assert monotonic_credit(np.zeros((0, 3)), np.zeros((0, 0)), 0.6, 0.4).tolist() == [0, 0, 0]
    assert monotonic_credit(np.zeros((2, 0)), np.eye(2), 0.6, 0.4).tolist() == []


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"theta": 0.0}, "theta"),
        ({"theta": 1.2}, "theta"),
        ({"theta": 1.0}, "theta"),
        ({"lam": 1.0}, "lam"),
        ({"order": [0, 0]}, "permutation"),
        ({"sim": [[0.5, np.nan]]}, r"\[0, 1\]"),
        ({"sim": [[1.5, 0.0]]}, r"\[0, 1\]"),
        ({"ref_sim": np.eye(2)}, "shape"),
    ],
)
def test_bad_inputs_are_clear_errors(kwargs, match):
    args = {"sim": [[0.9, 0.1]], "ref_sim": [[1.0]], "theta": 0.6, "lam": 0.4} | kwargs
    with pytest.raises(ValueError, match=match):
        monotonic_credit(**args)


@st.composite
def matcher_inputs(draw):
    m, ell = draw(st.integers(0, 8)), draw(st.integers(0, 10))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    theta = draw(st.sampled_from([0.6, 0.3, 0.9, 0.999]))
    # Mix exact cells (0, θ itself, 1) with continuous ones so both regimes and ties at θ occur.
    exact = np.array([0.0, theta, 1.0])
    M = np.where(rng.random((m, ell)) < 0.5, exact[rng.integers(0, 3, (m, ell))], rng.random((m, ell)))
    M_star = np.where(rng.random((m, m)) < 0.5, exact[rng.integers(0, 3, (m, m))], rng.random((m, m)))
    lam = draw(st.sampled_from([0.0, 0.2, 0.4]))
    order = rng.permutation(ell).tolist()
    return M.astype(float), M_star.astype(float), theta, min(lam, theta * 0.99), order


@settings(max_examples=300, deadline=None)
@given(matcher_inputs())
def test_properties(inputs):
    M, M_star, theta, lam, order = inputs
    m = M.shape[0]
    r, pos = credit_path(M, M_star, theta, lam, order)
    # r in [0, 1]; at most m credited steps; each credit is the soft score of its matched cell.
    assert np.all((r >= 0) & (r <= 1))
    credited = [v for v in order if pos[v] >= 0]
    assert len(credited) <= m
    for v in credited:
        assert M[pos[v], v] >= theta
        assert r[v] == pytest.approx(max(0.0, (M[pos[v], v] - lam) / (1 - lam)), abs=1e-12)
    # Credited reference positions strictly increase in processing order.
    assert all(a < b for a, b in zip([pos[v] for v in credited], [pos[v] for v in credited][1:]))
    # Uncredited steps get exactly 0.
    assert np.all(r[pos < 0] == 0)
    # The ablation walks the same path of j, so it credits a superset with the same values.
    r_all, pos_all = credit_path(M, M_star, theta, lam, order, monotonic=False)
    assert np.all(pos_all[pos >= 0] == pos[pos >= 0]) and np.all(r_all >= r)
