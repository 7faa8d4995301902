"""The purchase reward: the target product with the goal's options scores 1.0; hand-built partial matches give the
fractions the formula predicts; the colour-normalisation and type-score rules behave as the original's."""

from __future__ import annotations

import copy

import pytest

from agentr1_env_webshop.colors import COLOR_WORDS, normalize_color
from agentr1_env_webshop.nouns import noun_tokens
from agentr1_env_webshop.reward import option_matches, title_score, type_reward, webshop_reward


def buy(catalog, goal, asin=None, options=None, price=None):
    asin = asin or goal["asin"]
    if options is None:
        options = dict(goal["goal_options"]) if isinstance(goal["goal_options"], dict) else {}
    return webshop_reward(catalog.products[asin], goal, catalog.prices[asin] if price is None else price, options)


def test_color_words_are_webshops_list():
    assert len(COLOR_WORDS) == 102 and list(COLOR_WORDS) == sorted(COLOR_WORDS)
    assert normalize_color("black forest") == "black"
    assert normalize_color("violet lavender") == "lavender"  # first word in list order, not in the string
    assert normalize_color("123alabaster") == "alabaster"
    assert normalize_color("webshop") == "webshop"
    assert normalize_color(("color", "black")) == "black"  # a pair changes only when a member equals a colour word
    assert normalize_color(("color", "jet black")) == ("color", "jet black")


def test_target_purchase_scores_one_for_every_shipped_goal(catalog, synthetic_goals):
    scored = {g["asin"]: buy(catalog, g).reward for g in synthetic_goals[:24]}
    assert len(scored) == 24 and set(scored.values()) == {1.0}


def test_colour_normalisation_asymmetry_loses_an_option_like_the_original(catalog, synthetic_goals):
    # The clicked value is colour-normalised ('rectangular' contains 'tan'), the goal's (name, value) pair is not.
    for goal in synthetic_goals[24:]:
        a, o = len(goal["attributes"]), len(goal["goal_options"])
        values = list(goal["goal_options"].values())
        lost = sum(1 for k, v in goal["goal_options"].items() if option_matches([v], {k: v}) == 0)
        assert lost >= 1
        result = buy(catalog, goal)
        assert result.option_matches == o - lost
        assert result.reward == pytest.approx((a + o - lost + 1) / (a + o + 1))
        assert option_matches(values, goal["goal_options"]) == o - lost


def test_human_goal_targets(catalog, human_goals):
    for goal in human_goals:
        assert buy(catalog, goal, options={}).reward == pytest.approx(
            (len(goal["attributes"]) + 1) / (len(goal["attributes"]) + len(goal["goal_options"]) + 1))


def test_partial_matches_give_predicted_fractions(catalog, synthetic_goals):
    goal = copy.deepcopy(next(g for g in synthetic_goals if len(g["goal_options"]) >= 2))
    a, o = len(goal["attributes"]), len(goal["goal_options"])
    n = a + o + 1
    assert buy(catalog, goal, options={}).reward == pytest.approx((a + 1) / n)  # no options clicked
    first = next(iter(goal["goal_options"]))
    one = {first: goal["goal_options"][first]}
    assert buy(catalog, goal, options=one).reward == pytest.approx((a + 1 + 1) / n)
    too_dear = buy(catalog, goal, price=goal["price_upper"] + 0.01)
    assert too_dear.reward == pytest.approx((a + o) / n) and not too_dear.price_ok
    goal["attributes"] = goal["attributes"] + ["zzqx unobtainium"]  # an attribute nothing has
    assert buy(catalog, goal).reward == pytest.approx((a + o + 1) / (n + 1))


def test_attribute_text_match_fallback(catalog, synthetic_goals):
    goal = copy.deepcopy(synthetic_goals[0])
    product = copy.deepcopy(catalog.products[goal["asin"]])
    word = product["Title"].lower().split()[0]
    product["Attributes"] = ["DUMMY_ATTR"]
    goal["attributes"], goal["goal_options"] = [word, "zzqx unobtainium"], {}
    r = webshop_reward(product, goal, 1.0, {})
    assert r.attribute_matches == 1 and r.reward == pytest.approx(2 / 3)
    goal["attributes"] = [word.upper()]  # the goal string is matched case-sensitively against lower-cased text
    assert webshop_reward(product, goal, 1.0, {}).attribute_matches == 0


def test_type_reward_gates(catalog, synthetic_goals):
    goal = synthetic_goals[0]
    product = copy.deepcopy(catalog.products[goal["asin"]])
    assert type_reward(product, goal)[0] == 1.0
    # other query, no shared category levels, no shared title nouns -> 0
    product.update(query="zz", product_category="A \u203a B", name="quickly running")
    assert type_reward(product, goal) == (0.0, 0.0, False, False)
    # some title nouns but <= 0.2 overlap and nothing else matching -> 0.5 (if >= 0.1) or 0.1
    nouns = list(dict.fromkeys(noun_tokens(goal["name"])))
    product["name"] = nouns[0]
    score = title_score(product["name"], goal["name"])
    expected = 0.0 if score == 0 else 0.1 if score < 0.1 else 0.5 if score <= 0.2 else 1.0
    assert type_reward(product, goal)[0] == expected
    product["product_category"] = goal["product_category"]  # category match lifts the 0.5 gate only
    assert type_reward(product, goal)[0] == (1.0 if expected == 0.5 else expected)


def test_title_score_counts_goal_nouns_with_repeats():
    assert title_score("Table Lamp", "Table Table Lamp") == pytest.approx(2 / 3)
    assert title_score("Lamp", "quickly") == 0.2  # goal name without nouns


def test_attribute_text_fields_are_read_only_when_needed_and_may_be_missing():
    from agentr1_env_webshop.reward import attribute_matches

    # matched through Attributes: title, bullet points and description are never needed
    assert attribute_matches({"Attributes": ["machine wash"]}, ["machine wash"]) == 1
    # matched in the title: the absent bullet points and description are not read
    assert attribute_matches({"Attributes": [], "Title": "Soft Cotton Shirt"}, ["cotton"]) == 1
    # found only in the description, with no title, bullet points or attributes at all
    assert attribute_matches({"Description": "Long lasting battery"}, ["long lasting", "waterproof"]) == 1
    assert attribute_matches({}, ["anything"]) == 0
    assert attribute_matches({"BulletPoints": ["Easy to clean surface"]}, ["easy to clean"]) == 1
