"""Model-output fuzzing on WebShop: generated responses through projection (SPEC §6) and the
embedded shop's step, with WebShop's own action regex as the acceptance oracle; and search text
that trips a tokenizer. The strategies and the projection oracle are ``tests/test_fuzz_actions.py``'s.
Counts: 1000 responses through projection and WebShop; 1000 searches with possessives and
one-letter words.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.registry import make_env_factory
from scpo_lightning.prompts import project_action, prompt_style
from tests.conftest import require
from tests.test_fuzz_actions import (BLANK, CONTROL, FAKE_WEBSHOP, HUGE, HYPOTHESIS, INJECTIONS, _check_projection,
                                     responses)

# --------------------------------------------------------------------------- WebShop
WEBSHOP_PARSER = re.compile(r"(.+)\[(.+)\]")  # WebShop's own action pattern (web_agent_site_env.py)
ORACLE_MAX_CHARS = 4000  # the regex backtracks quadratically; longer actions skip the acceptance oracle


def webshop_accepts(action: str, admissible: list[str]) -> bool:
    """WebShop's rule: ``search[<non-empty>]`` always; ``click[x]`` when x is clickable (not search)."""
    match = WEBSHOP_PARSER.match(action)
    if match is None:
        return False
    name, arg = match.group(1), match.group(2).lower()
    return name == "search" or (name == "click" and arg != "search" and f"click[{arg}]" in admissible)


@pytest.fixture(scope="module")
def webshop_env():
    require("Stemmer", extra="webshop")
    return make_env_factory("webshop", {"max_steps": 10**6})()


def test_webshop_fuzzed_responses_through_projection_and_env(webshop_env):
    env = webshop_env
    seen = Counter()

    @settings(max_examples=50, **HYPOTHESIS)
    @given(st.data())
    def episode(data):
        index = data.draw(st.integers(0, 20))
        start = env.reset("train", index)
        obs, admissible = start.observation, start.admissible
        for _ in range(20):
            # The placeholder "search[<your query>]" is offered on the search page; type a real query too.
            # Opening products and buying weigh more, so that episodes reach the purchase often.
            forward = [a for a in admissible if a == "click[buy now]" or re.fullmatch(r"click\[b0\w{8}\]", a)]
            offered = admissible + [f"search[{start.task}]", "search[shoes]"] + forward * 4
            text = data.draw(responses(FAKE_WEBSHOP, offered))
            action = _check_projection(text, "webshop")
            state = env.state
            t = env.step(action.action)
            seen["responses"] += 1
            seen["valid" if action.valid else "invalid"] += 1
            if len(action.action) <= ORACLE_MAX_CHARS:
                assert t.info["action_accepted"] == webshop_accepts(action.action, admissible), action.action
            if t.info["action_accepted"]:
                seen["accepted"] += 1
                obs, admissible = t.observation, t.admissible
                if t.done:
                    seen["bought"] += 1
                    start = env.reset("train", index)
                    obs, admissible = start.observation, start.admissible
                continue
            seen["refused"] += 1
            assert (t.observation, t.admissible, t.noop, t.reward, t.done) == (obs, admissible, True, 0.0, False)
            assert env.state == state and t.info["error"]

    episode()
    assert seen["responses"] >= 1000
    assert min(seen["valid"], seen["invalid"], seen["accepted"], seen["refused"], seen["bought"]) > 0, seen


def test_webshop_oracle_episode_after_bad_actions_is_as_on_a_fresh_env(webshop_env):
    from envs.webshop.policies import run_oracle

    fresh = make_env_factory("webshop")()
    index = next(i for i in range(50) if run_oracle(fresh, "valid", i).won)
    plan = run_oracle(fresh, "valid", index).actions
    fresh.reset("valid", index)
    expected = [fresh.step(a) for a in plan]

    env = webshop_env
    start = env.reset("valid", index)
    obs, admissible = start.observation, start.admissible
    for action, want in zip(plan, expected):
        bursts = [project_action(t, prompt_style("webshop", "prompts")).action for t in BLANK + INJECTIONS + CONTROL + FAKE_WEBSHOP]
        for bad in [b for b in bursts if not webshop_accepts(b, admissible)]:
            t = env.step(bad)
            assert (t.observation, t.admissible, t.noop) == (obs, admissible, True)
        got = env.step(action)
        assert (got.observation, got.admissible, got.reward, got.won) == (want.observation, want.admissible,
                                                                          want.reward, want.won)
        obs, admissible = got.observation, got.admissible
    assert got.won and got.reward == 10.0


@settings(max_examples=2000, **HYPOTHESIS)
@given(st.text(alphabet="[]ab \n\r.", max_size=16))
def test_webshop_action_parser_is_webshops_regex(action):
    from envs.webshop.pages import parse_action

    match = WEBSHOP_PARSER.match(action)
    assert parse_action(action) == ((action, None) if match is None else match.groups())


@pytest.mark.timeout(10)
def test_webshop_pathological_brackets_do_not_stall_a_step(webshop_env):
    """WebShop's regex needs ~30 s for this action; a step must not (pytest-timeout fails it)."""
    start = webshop_env.reset("train", 0)
    for text in ("[" * HUGE, "search[" + "[" * HUGE + "]", "click" + "[a" * (HUGE // 2)):
        t = webshop_env.step(text)  # none parses as search[...] or click[...]: all refused
        assert (t.info["action_accepted"], t.observation, t.noop) == (False, start.observation, True)


# --------------------------------------------------------------------------- WebShop search text
# Query words that trip a tokenizer: possessives (three apostrophes), one-letter and one-digit
# words, stop words, a bare "'s", and catalog words; joined by the separators model text uses.
SEARCH_WORDS = ["shoes", "men", "women", "size", "red", "clock", "wall", "girl", "kid", "dress"]
ONE_LETTER = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789")
POSSESSIVES = [f"{w}{a}s" for w in SEARCH_WORDS + ["s", "x"] for a in ("'", "\u2019", "\uff07")]
SEARCH_PIECES = SEARCH_WORDS + ONE_LETTER + POSSESSIVES + ["'s", "s'", "'", "the", "is", "a", "of", "S", "XL", "2.5"]


def _queries() -> st.SearchStrategy[str]:
    words = st.lists(st.sampled_from(SEARCH_PIECES), min_size=1, max_size=8)
    seps = st.sampled_from([" ", "  ", "-", ", ", ".", "/", " & "])
    return st.tuples(words, seps).map(lambda ws: ws[1].join(ws[0]))


def test_webshop_search_with_possessives_and_one_letter_words_steps(webshop_env):
    """Every search[...] is accepted and shows a results page; "men's" searches as "men" (WebShop's
    Lucene drops possessives), and one-letter words such as "s" (which a Snowball stemmer empties) are
    terms like any other."""
    env, seen = webshop_env, Counter()
    env.reset("train", 0)
    t = env.step("search[men's shoes]")
    assert t.info["action_accepted"] and t.info["page"] == "results" and "Total results" in t.observation
    engine = env.shop.engine
    assert engine.search("men's shoes") == engine.search("men shoes") != []
    assert engine.search("women\u2019s") == engine.search("women")
    assert engine.search("x") != []  # a one-letter word is a term ("x-large" has it), not dropped

    @settings(max_examples=1000, **HYPOTHESIS)
    @given(_queries())
    def search(query):
        t = env.step(f"search[{query}]")  # must not raise, whatever the words
        assert t.info["action_accepted"] and t.info["page"] == "results", query
        assert re.search(r"Page 1 \(Total results: \d+\)", t.observation), query
        possessive_free = re.sub(r"(?<=\w)['\u2019\uff07]s\b", "", query)
        assert engine.search(query) == engine.search(possessive_free), query
        seen["searches"] += 1
        seen["with hits" if "Total results: 0)" not in t.observation else "no hits"] += 1

    search()
    assert seen["searches"] == 1000 and min(seen["with hits"], seen["no hits"]) > 0, seen
