"""benchmarks.learning_reproduction: which values of a re-run's file differ from the original's."""

from __future__ import annotations

import copy

from benchmarks.learning_reproduction import compare, table


def run() -> dict:
    return {"method": "scpo", "seed": 3, "config_sha256": "abc",
            "validations": [{"iteration": 0, "success": 0.5, "outcomes": [["g1", True], ["g2", False]]}],
            "iterations": [{"tasks": ["g7"], "kl": 0.25, "grad_norm": 2.0}, {"tasks": ["g8"], "kl": 0.5, "grad_norm": 1.0}],
            "timing": {"fit_s": 10.0, "iteration_0_measured_here": True},
            "provenance": {"commit": "0123456789", "machine": {"cpu_model": "EPYC", "cpu_capability": "AVX512"}}}


def test_a_file_against_itself_differs_nowhere_and_timing_is_not_compared():
    a, b = run(), run()
    b["timing"]["fit_s"], b["provenance"]["commit"] = 99.0, "fedcba9876"
    c = compare(a, b)
    # Non-floats: method, seed, hash, iteration, 2 outcomes x (id, won), 2 tasks = 10 values.
    assert c["exact"] == {"compared": 10, "differing": []}
    assert {k: (f["compared"], f["differing"]) for k, f in c["floats"].items()} == {
        "validations.success": (1, 0), "iterations.kl": (2, 0), "iterations.grad_norm": (2, 0)}
    assert c["games"] == 2 and "| the 3 other float fields | 0 / 5 | 0 | 0 |" in table(a, b)


def test_float_noise_is_measured_and_an_outcome_or_a_missing_key_is_named():
    a, b = run(), copy.deepcopy(run())
    b["iterations"][1]["kl"] = 0.5 + 1e-6  # relative 1e-6 / (0.5 + 1e-6) ~ 2.0e-6
    b["validations"][0]["outcomes"][1][1] = True
    del b["iterations"][0]["tasks"]
    c = compare(a, b)
    assert c["exact"]["differing"] == ["iterations[0].tasks[0]", "validations[0].outcomes[1][1]"]
    kl = c["floats"]["iterations.kl"]
    assert kl["differing"] == 1 and abs(kl["max_absolute"] - 1e-6) < 1e-12 and abs(kl["max_relative"] - 2e-6) < 1e-9
    assert "| `iterations.kl` | 1 / 2 | 1.0e-06 | 2.0e-06 |" in table(a, b)
