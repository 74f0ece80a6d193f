"""SCPO credit through CachedScorer equals credit from naive per-pair scoring, bit for bit."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from scpo_lightning.scorers import CachedScorer, LexicalScorer
from scpo_lightning.scpo import monotonic_credit
from scpo_lightning.credit import apply_plan
from scpo_lightning.scpo_config import SCPOConfig
from scpo_lightning.shaper import plan_shaping

ACTIONS = ["go to fridge 1", "open fridge 1", "take apple 1 from fridge 1", "go to sinkbasin 1",
           "clean apple 1 with sinkbasin 1", "go to countertop 1", "look"]
OBSERVATIONS = ["You arrive at fridge 1. The fridge 1 is closed.", "You open the fridge 1.",
                "You pick up the apple 1.", "On the sinkbasin 1, you see nothing.",
                "You clean the apple 1 using the sinkbasin 1.", "Nothing happens."]


class HashScorer:
    """Deterministic fake model, one pair's score independent of its batch; mostly high scores
    so that the matcher actually credits steps."""

    def score(self, pairs):
        return np.array([
            0.3 + 0.7 * int.from_bytes(hashlib.blake2b(f"{a}\x00{b}".encode(), digest_size=8).digest(), "little") / 2.0**64
            if a != b else 1.0
            for a, b in pairs
        ])


def random_batch(rng: np.random.Generator, n_groups: int = 4, n: int = 8) -> dict:
    rows = {k: [] for k in ("group_ids", "traj_ids", "steps", "traj_returns", "actions",
                            "observations", "is_action_valid", "noop", "lengths")}
    for g in range(n_groups):
        for i in range(n):
            length = int(rng.integers(1, 12))
            ret = 10.0 if rng.random() < 0.3 else 0.0
            for t in range(length):
                rows["group_ids"].append(g)
                rows["traj_ids"].append(g * n + i)
                rows["steps"].append(t)
                rows["traj_returns"].append(ret)
                rows["actions"].append(str(rng.choice(ACTIONS)))
                rows["observations"].append(str(rng.choice(OBSERVATIONS)))
                rows["is_action_valid"].append(bool(rng.random() > 0.1))
                rows["noop"].append(bool(rng.random() < 0.1))
                rows["lengths"].append(int(rng.integers(50, 500)))
    return rows


def naive_credit(rows: dict, plan, inner, config: SCPOConfig) -> np.ndarray:
    """Every block scores its own m×ℓ and m×m pairs one pair per scorer call (no sharing)."""
    text = [f"{a}{config.separator}{o}" for a, o in zip(rows["actions"], rows["observations"])]
    credit = np.zeros(plan.n_rows)
    for b in plan.blocks:
        sim = np.array([[inner.score([(text[u], text[v])])[0] for v in b.rows] for u in b.ref_rows])
        ref = np.array([[inner.score([(text[u], text[v])])[0] for v in b.ref_rows] for u in b.ref_rows])
        credit[b.rows] = monotonic_credit(sim, ref, config.theta, config.lam, b.order, config.monotonic)
    return credit


@pytest.mark.parametrize("make_inner", [LexicalScorer, HashScorer])
def test_cached_scoring_gives_bit_identical_credit(make_inner):
    rng = np.random.default_rng(0)
    config = SCPOConfig()
    cached = CachedScorer(make_inner(), cache_entries=200)
    credited = 0
    for _ in range(6):  # consecutive iterations share the cache
        rows = random_batch(rng)
        plan = plan_shaping(config=config, rng=rng, **rows)
        got = apply_plan(plan, cached.score(plan.pairs), config).credit
        want = naive_credit(rows, plan, make_inner(), config)
        assert got.tobytes() == want.tobytes()
        credited += int(np.count_nonzero(got))
    assert credited > 0, "the batches should exercise the matcher"
    assert cached.last_stats.cache_hits > 0
