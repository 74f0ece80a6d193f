"""The SCPO batch shaper (SPEC §3.1-3.10) on hand-built and random batches."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scpo_lightning.ordering import processing_order
from scpo_lightning.scorers import LexicalScorer
from scpo_lightning.scpo import monotonic_credit
from scpo_lightning.credit import scpo_shape
from scpo_lightning.scpo_config import SCPOConfig
from scpo_lightning.shaper import plan_shaping, step_texts


class TableScorer:
    """1.0 for identical texts, a listed score for listed pairs, else 0.0; records its calls."""

    def __init__(self, table=None):
        self.table = table or {}
        self.calls = []

    def score(self, pairs):
        self.calls.append(list(pairs))
        return np.array([1.0 if a == b else self.table.get((a, b), 0.0) for a, b in pairs])


def row(g, t, step, act, obs, ret, valid=1, noop=0):
    return dict(group_ids=g, traj_ids=t, steps=step, actions=act, observations=obs,
                traj_returns=ret, is_action_valid=valid, noop=noop)


def columns(rows):
    return {k: [r[k] for r in rows] for k in rows[0]}


X0 = ("go to fridge 1", "You arrive at fridge 1.")
X1 = ("open fridge 1", "You open the fridge 1.")
X2 = ("take apple 1 from fridge 1", "You pick up the apple 1.")
B2 = ("open fridge 1", "The fridge 1 is open.")
SEP = " || "
HAND = [
    # g1: a succeeds in 3 steps (the longest success -> the reference), d succeeds in 2.
    row("g1", "a", 0, *X0, 10), row("g1", "a", 1, *X1, 10), row("g1", "a", 2, *X2, 10),
    row("g1", "d", 0, *X0, 10), row("g1", "d", 1, *X2, 10),
    # b fails: step 1 is a no-op and step 3 is invalid (both filtered); step 2 paraphrases X1.
    row("g1", "b", 0, *X0, 0), row("g1", "b", 1, "look", "Nothing happens.", 0, noop=1),
    row("g1", "b", 2, *B2, 0), row("g1", "b", 3, *X2, 0, valid=0),
    # c fails with only the last reference step: no prefix progress, no credit.
    row("g1", "c", 0, *X2, 0),
    # g2: nobody succeeds -> untouched.  g3: everybody succeeds -> untouched.
    row("g2", "e", 0, *X0, 0), row("g2", "f", 0, *X0, 0),
    row("g3", "h", 0, *X0, 10), row("g3", "i", 0, *X1, 10),
]


def hand_shape(**config):
    scorer = TableScorer({(SEP.join(X1), SEP.join(B2)): 0.7})
    g = np.arange(len(HAND), dtype=float)
    cfg = SCPOConfig(**({"alpha": 0.5, "theta": 0.6, "lam": 0.4, "order": "chronological"} | config))
    return scpo_shape(g, scorer=scorer, config=cfg, **columns(HAND)), g, scorer


def test_hand_batch_credit_returns_and_stats():
    # Reference a: x0, x1, x2 (m = 3). Failed b, filtered: (b0 = x0, b2 = paraphrase of x1).
    #   b0: M[0, b0] = 1 -> position 0, r = (1 - 0.4)/0.6 = 1.
    #   b2: M[1, b2] = 0.7 -> position 1, r = (0.7 - 0.4)/0.6 = 0.5.
    #   b1 (no-op) and b3 (invalid) are filtered: r = 0 although b3 equals x2.
    # Failed c: c0 = x2 but M[0, c0] = f(x0, x2) = 0 < θ: the frontier cannot jump, r = 0.
    # G̃ = G + α r with α = 0.5 on rows b0 (index 5) and b2 (index 7).
    result, g, scorer = hand_shape()
    expected = np.zeros(len(HAND))
    expected[5], expected[7] = 1.0, 0.5
    np.testing.assert_allclose(result.credit, expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(result.shaped_returns, g + 0.5 * expected, rtol=0, atol=1e-12)
    # Stats: 3 groups, 2 with a success; failed siblings b and c; credited steps (2 + 0) / 2;
    # mean auxiliary reward α · mean r over the 5 failed rows = 0.5 · 1.5 / 5 = 0.15.
    # Pairs requested: M* 3×3 + M_b 3×2 + M_c 3×1 = 18; distinct: the 9 of M* (M_b's x0 column
    # and all of M_c repeat them) + 3 against the paraphrase = 12, scored in one call.
    assert result.stats == pytest.approx({
        "groups": 3, "groups_with_reference": 2, "groups_with_buffer_reference": 0, "buffer_lookups": 0,
        "failed_trajectories": 2, "credited_steps_per_failed": 1.0, "mean_aux_reward": 0.15,
        "pairs_requested": 18, "pairs_distinct": 12,
    })
    assert len(scorer.calls) == 1 and len(scorer.calls[0]) == 12


def test_shortest_reference():
    # With d (x0, x2) as reference: b0 = x0 -> position 0, credit 1; b2 scores 0 against x2;
    # c0 = x2 -> f(x0, x2) = 0 < θ: nothing.
    result, _, _ = hand_shape(reference="shortest")
    assert np.flatnonzero(result.credit).tolist() == [5]


def test_theta_near_one_credits_only_identical_steps():
    result, g, _ = hand_shape(theta=0.99, lam=0.0)
    # θ = 0.99: only identical texts (score 1.0) match, not the 0.7 paraphrase; b0 earns (1 - 0)/1 = 1.
    assert result.credit.tolist() == [0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]


@pytest.mark.parametrize(
    "field, value", [("alpha", -1), ("theta", 0), ("theta", 1.0), ("lam", 0.6), ("reference", "best"),
                     ("order", "sorted"), ("order_partitions", 0)])
def test_config_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        SCPOConfig(**{field: value})


def test_inconsistent_rows_are_rejected():
    rows = columns(HAND)
    rows["traj_returns"][1] = 3.0  # trajectory a with two different returns
    with pytest.raises(ValueError, match="traj_returns"):
        plan_shaping(config=SCPOConfig(order="chronological"), **rows)


@st.composite
def batches(draw):
    """Random groups of trajectories over a small step vocabulary (so texts repeat)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    rows = []
    for g in range(draw(st.integers(1, 4))):
        for k in range(draw(st.integers(1, 5))):
            n = int(rng.integers(1, 9))
            ret = float(rng.choice([0.0, 10.0]))
            for t in range(n):
                rows.append(row(f"g{g}", f"g{g}t{k}", t, f"act {rng.integers(4)}", f"obs {rng.integers(3)}",
                                ret, valid=int(rng.random() > 0.15), noop=int(rng.random() < 0.15)))
    # Interleave trajectories as a lock-step collector would (step-major), keeping step order.
    rows.sort(key=lambda r: r["steps"])
    lengths = rng.integers(10, 200, len(rows))
    cfg = SCPOConfig(
        alpha=0.5, theta=float(draw(st.sampled_from([0.3, 0.6, 0.9]))), lam=0.2,
        reference=draw(st.sampled_from(["longest", "shortest"])),
        order=draw(st.sampled_from(["balanced", "chronological"])),
        order_partitions=draw(st.integers(1, 4)), monotonic=draw(st.booleans()),
    )
    return columns(rows), lengths, cfg


def naive_credit(rows, lengths, cfg, scorer):
    """Per group and failed sibling, score every pair on its own and run the matcher."""
    n = len(rows["steps"])
    perm = processing_order(cfg.order, lengths, n, cfg.order_partitions, traj_ids=rows["traj_ids"], steps=rows["steps"])
    rank = np.argsort(perm)
    credit = np.zeros(n)
    text = step_texts(rows["actions"], rows["observations"], cfg.separator)
    trajs = {}
    for i in range(n):
        trajs.setdefault(rows["group_ids"][i], {}).setdefault(rows["traj_ids"][i], []).append(i)
    for members in trajs.values():
        wins = [t for t, ix in members.items() if rows["traj_returns"][ix[0]] > cfg.tau_succ]
        if not wins:
            continue
        pick = max if cfg.reference == "longest" else min
        best = pick(len(members[t]) for t in wins)
        ref = next(t for t in wins if len(members[t]) == best)
        keep = lambda ix: [i for i in ix if rows["is_action_valid"][i] and not rows["noop"][i]]  # noqa: E731
        ref_rows = keep(members[ref])
        M_star = np.array([[scorer.score([(text[a], text[b])])[0] for b in ref_rows] for a in ref_rows])
        for t, ix in members.items():
            if t in wins:
                continue
            w = keep(ix)
            M = np.array([[scorer.score([(text[a], text[b])])[0] for b in w] for a in ref_rows])
            order = np.argsort(rank[w], kind="stable")
            m = len(ref_rows)
            credit[w] = monotonic_credit(M.reshape(m, len(w)), M_star.reshape(m, m),
                                         cfg.theta, cfg.lam, order, cfg.monotonic)
    return credit


@settings(max_examples=80, deadline=None)
@given(batches())
def test_batched_deduplicated_shaping_equals_naive_per_pair_scoring(batch):
    rows, lengths, cfg = batch
    scorer = LexicalScorer()
    g = np.random.default_rng(0).normal(size=len(lengths))
    result = scpo_shape(g, scorer=scorer, config=cfg, lengths=lengths, **rows)
    np.testing.assert_array_equal(result.credit, naive_credit(rows, lengths, cfg, scorer))
    # Successful siblings, and every row of a group without success, keep G exactly.
    ret = np.asarray(rows["traj_returns"])
    untouched = ret > cfg.tau_succ
    for grp in set(rows["group_ids"]):
        idx = [i for i, x in enumerate(rows["group_ids"]) if x == grp]
        if not (ret[idx] > cfg.tau_succ).any():
            untouched[idx] = True
    np.testing.assert_array_equal(result.shaped_returns[untouched], g[untouched])
    assert np.all((result.credit >= 0) & (result.credit <= 1))
    assert result.stats["pairs_distinct"] <= result.stats["pairs_requested"]


@settings(max_examples=30, deadline=None)
@given(batches())
def test_balanced_with_one_partition_is_chronological(batch):
    rows, lengths, cfg = batch
    out = []
    for order in ("balanced", "chronological"):
        c = SCPOConfig(order=order, order_partitions=1, theta=cfg.theta, lam=cfg.lam)
        out.append(scpo_shape(np.zeros(len(lengths)), scorer=LexicalScorer(), config=c, lengths=lengths, **rows).credit)
    np.testing.assert_array_equal(out[0], out[1])
