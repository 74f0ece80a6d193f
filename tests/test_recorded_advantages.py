"""SCPO + GiGPO advantages on the recorded batches, bit for bit against the code before the refactor.

Issue 16 moved the SCPO hand-off, the estimators and the PPO epoch between files; it was to change
no number. ``tests/data/recorded_advantages.npz`` holds the advantages of every recorded batch in
``benchmarks/data/`` (ALFWorld under mean_std_norm, WebShop under mean_norm; the balanced and the
random step order), shaped by the SCPO callback with the lexical scorer (deterministic, no weights)
and computed by the module's ``advantages``, as written by this file's ``__main__`` on commit
7ef9879 (the last commit before the refactor; copy this file into a checkout of it and run
``python -m tests.test_recorded_advantages``; there, the result is awaited with
``batch.wait_shaping()``, which issue 31 replaced by ``callback.result(batch)``). The test runs
the same path on today's code.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np

REFERENCE = Path(__file__).parent / "data" / "recorded_advantages.npz"
CASES = (("alfworld", "mean_std_norm"), ("webshop", "mean_norm"))


def advantages_by_case() -> dict[str, np.ndarray]:
    """'env/order/batch file' -> the float64 advantages of that batch, as training computes them."""
    from benchmarks.record_batches import load_batches
    from callbacks.scpo import SCPOCallback
    from scpo_lightning.module import SCPOModule

    try:
        from scpo_lightning.estimators import GiGPO  # after the refactor: the estimator is a component
        estimator = GiGPO()
    except ImportError:  # before it (commit 7ef9879): the module dispatched on the name
        estimator = None
    out = {}
    for env, mode in CASES:
        for order in ("balanced", "random"):
            callback = SCPOCallback(scorer="lexical", alpha=0.5, theta=0.6, lam=0.4, order=order, order_partitions=4,
                                    seed=0)
            callback.setup(None, SimpleNamespace(estimator=estimator), "fit")
            module = SimpleNamespace(hparams=SimpleNamespace(estimator="gigpo", norm_mode=mode, omega=1.0),
                                     estimator=estimator)
            try:
                for name, batch in load_batches(env):
                    callback.on_train_batch_start(None, None, batch, 0)
                    batch.shaping = callback.result(batch)
                    out[f"{env}/{order}/{name}"] = np.asarray(SCPOModule.advantages(module, batch), dtype=np.float64)
            finally:
                callback.teardown(None, None, "fit")
    return out


def test_scpo_gigpo_advantages_on_the_recorded_batches_are_unchanged_bit_for_bit():
    reference = np.load(REFERENCE)
    got = advantages_by_case()
    assert sorted(got) == sorted(reference.files)
    assert len(got) == 32  # 2 orders x (9 ALFWorld + 7 WebShop recorded batches)
    for case, advantages in got.items():
        np.testing.assert_array_equal(advantages, reference[case], err_msg=case)


if __name__ == "__main__":
    np.savez_compressed(REFERENCE, **advantages_by_case())
    print(f"wrote {REFERENCE}")
