"""The five GSM8K rewards, each on a table of cases with the reason it scores what it scores.

Scores are unit scores; the recipe's values come from the weights (conf/reward/gsm8k_stack.yaml: correctness 2,
integer 0.5, strict 0.5, soft 0.5, XML count 0.5, so 0.125 a tag and 0.001 a trailing character).
"""

from __future__ import annotations

import pytest
import yaml

from conf import CONF_DIR
from curriculum.tasks.base import RewardSettings
from curriculum.tasks.gsm8k import GSM8KTask
from curriculum.tasks.gsm8k.rewards import (
    GIST_FORMAT_FUNCTIONS,
    REWARD_FUNCTIONS,
    VERBATIM_FUNCTIONS,
    correctness_reward,
    integer_reward,
    soft_format_reward,
    strict_format_reward,
    xml_count_reward,
)

# what the run hands every task's rewards (GSM8K's read neither)
SETTINGS = RewardSettings("reasoning_answer", 200)
# the recipe's weights, from their one source: reward=gsm8k_stack
RECIPE_WEIGHTS = yaml.safe_load((CONF_DIR / "reward" / "gsm8k_stack.yaml").read_text())["weights"]

GOOD = "<reasoning>\n48 / 2 = 24\n24 + 48 = 72\n</reasoning>\n<answer>\n72\n</answer>\n"


def _one(reward, completion, **columns) -> float:
    (score,) = reward([completion], **{k: [v] for k, v in columns.items()})
    return score


@pytest.mark.parametrize(("completion", "score"), [
    (GOOD, 1.0),  # the reference number in the answer block
    (GOOD.replace("\n72\n", "\n$72.\n"), 1.0),  # "$72." reads as 72
    (GOOD.replace("\n72\n", "\n72.0\n"), 1.0),  # same number, exactly
    ("<answer>72</answer>", 1.0),  # correctness does not ask for the format (strict/soft/xml do)
    (GOOD.replace("\n72\n", "\n71\n"), 0.0),  # wrong number
    (GOOD.replace("\n72\n", "\n72 apples\n"), 0.0),  # units: not one number
    (GOOD.replace("\n72\n", "\n72 or 73\n"), 0.0),  # two numbers: refused, though one is right
    ("The answer is 72", 0.0),  # no answer block (the recipe's split would have read the whole text)
    ("<answer>72", 0.0),  # unclosed block: no answer
    ("<answer>72</answer><answer>71</answer>", 0.0),  # the final block decides
])
def test_correctness(completion, score):
    assert _one(correctness_reward, completion, answer="72") == score


@pytest.mark.parametrize(("completion", "score"), [
    (GOOD, 1.0),  # a whole number
    (GOOD.replace("\n72\n", "\n71\n"), 1.0),  # wrong but whole: the reward teaches the answer's form
    (GOOD.replace("\n72\n", "\n-3\n"), 1.0),  # negative whole numbers are whole (the recipe's isdigit said no)
    (GOOD.replace("\n72\n", "\n1,000\n"), 1.0),  # thousands commas are a whole number's (isdigit said no)
    (GOOD.replace("\n72\n", "\n2.5\n"), 0.0),  # a decimal part
    (GOOD.replace("\n72\n", "\n72.0\n"), 0.0),  # written with a decimal part, though its value is whole
    (GOOD.replace("\n72\n", "\n²\n"), 0.0),  # a superscript is a Unicode digit, not a number (isdigit said yes)
    (GOOD.replace("\n72\n", "\nseventy-two\n"), 0.0),  # words
    ("72", 0.0),  # no answer block
])
def test_integer(completion, score):
    assert _one(integer_reward, completion) == score


@pytest.mark.parametrize(("completion", "score"), [
    (GOOD, 1.0),  # the recipe's layout, a multi-line reasoning included (re.DOTALL)
    (GOOD.rstrip("\n"), 1.0),  # ending at </answer> (TRL strips the end-of-sequence token)
    (GOOD + "Hope this helps!", 0.0),  # text after </answer>
    (GOOD.replace("<answer>\n72\n</answer>", "<answer>72</answer>"), 0.0),  # the answer needs its own lines
    ("<reasoning>\nr\n</reasoning>\n\n<answer>\n72\n</answer>", 0.0),  # a blank line between the blocks
    ("Let me think.\n" + GOOD, 0.0),  # anything before <reasoning>
    ("<think>\nr\n</think>\n<answer>\n72\n</answer>", 0.0),  # R1's tags are not this recipe's
])
def test_strict_format(completion, score):
    assert _one(strict_format_reward, completion) == score


@pytest.mark.parametrize(("completion", "score"), [
    (GOOD, 1.0),  # strict implies soft
    ("<reasoning>r</reasoning><answer>72</answer>", 1.0),  # no newlines needed
    ("<reasoning>r</reasoning>\nSo:\n<answer>72</answer> done", 1.0),  # text between and after is allowed
    ("<reasoning>\nr\n</reasoning>", 0.0),  # no answer block
    ("<answer>72</answer><reasoning>r</reasoning>", 0.0),  # the blocks out of order
    (" <reasoning>r</reasoning><answer>72</answer>", 0.0),  # re.match: must start with <reasoning>
    ("<reasoning>r<answer>72</answer>", 0.0),  # reasoning never closed
])
def test_soft_format(completion, score):
    assert _one(soft_format_reward, completion) == score


@pytest.mark.parametrize(("completion", "score"), [
    (GOOD, 1.0),  # all four tags once, one free newline after </answer>: 4 x 0.25
    (GOOD.rstrip("\n"), 1.0),  # nothing after </answer> (the recipe's count_xml took 0.001 a character here)
    (GOOD + "abc", 0.994),  # three characters after </answer>\n: 1 - 3 x 0.002
    (GOOD.rstrip("\n") + " abc", 0.992),  # four after </answer> when no newline comes first
    ("<reasoning>\nr\n</reasoning>\n<answer>72</answer>", 0.5),  # the answer tags lack their newlines
    ("<answer>\n72\n</answer>", 0.25),  # "\n<answer>\n" needs the newline before it; "\n</answer>" counts
    ("<reasoning>\nr\n</reasoning>\n", 0.5),  # reasoning tags only
    (GOOD + GOOD, 0.0),  # every tag twice: none counts (and no trailing penalty either)
    ("72", 0.0),
    (GOOD.rstrip("\n") + "x" * 600, -0.2),  # a long tail after </answer> outweighs the tags: 1 - 600 x 0.002
])
def test_xml_count(completion, score):
    assert _one(xml_count_reward, completion) == pytest.approx(score)


def test_the_recipe_weights_give_its_values():
    """At the recipe's weights a perfect completion earns 2 + 0.5 + 0.5 + 0.5 + 4 x 0.125 = 4.0."""
    total = sum(RECIPE_WEIGHTS[name] * _one(f, GOOD, answer="72") for name, f in REWARD_FUNCTIONS.items())
    assert total == pytest.approx(4.0)
    trailing = RECIPE_WEIGHTS["xml_count"] * _one(xml_count_reward, GOOD + "abc")
    assert trailing == pytest.approx(4 * 0.125 - 3 * 0.001)  # the recipe's 0.001 a character


def test_conversational_completions_score_like_text():
    chat = [{"role": "assistant", "content": GOOD}]
    for name, reward in REWARD_FUNCTIONS.items():
        assert reward([chat], answer=["72"]) == reward([GOOD], answer=["72"]), name


def test_every_reward_ignores_trl_extras_and_keeps_batch_order():
    batch = [GOOD, "<answer>71</answer>", "nothing"]
    extras = {"answer": ["72"] * 3, "prompts": ["p"] * 3, "trainer_state": None, "id": ["a", "b", "c"]}
    assert correctness_reward(batch, **extras) == [1.0, 0.0, 0.0]
    assert integer_reward(batch, **extras) == [1.0, 1.0, 0.0]


def test_the_task_and_the_config_offer_the_recipe_stack():
    task = GSM8KTask(source="sample")
    # the write-up's five and the gist's two format readings: their own file
    assert task.reward_functions(SETTINGS) == {**REWARD_FUNCTIONS, **VERBATIM_FUNCTIONS, **GIST_FORMAT_FUNCTIONS}
    config = yaml.safe_load((CONF_DIR / "reward" / "gsm8k_stack.yaml").read_text())
    assert config["task"] == task.name and not task.default_weights  # the file is the one source of its weights
    assert config["weights"] == {"correctness": 2.0, "integer": 0.5, "strict_format": 0.5, "soft_format": 0.5,
                                 "xml_count": 0.5}  # the recipe's values
