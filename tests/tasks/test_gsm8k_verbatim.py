"""reward=gsm8k_stack_verbatim: the recipe's five rewards as the write-up the GSM8K system follows writes them (both
format patterns with re.DOTALL), reward=gsm8k_stack_gist: the earlier gist's reading of the two formats (no flags),
beside reward=gsm8k_stack on the same completions; each row says where they part and why (docs/tasks.md's table)."""

from __future__ import annotations

import re

import pytest
import yaml

from conf import CONF_DIR
from curriculum.tasks.gsm8k import GSM8KTask
from curriculum.tasks.gsm8k.grader import SOFT_FORMAT, STRICT_FORMAT
from curriculum.tasks.gsm8k.rewards import (
    GIST_FORMAT_FUNCTIONS,
    REWARD_FUNCTIONS,
    VERBATIM_FUNCTIONS,
    extract_xml_answer,
)
from tests.conftest import compose_cfg
from train.rewards.reward_group import reward_stack

# reward=gsm8k_stack's weights, the recipe's values
RECIPE_WEIGHTS = yaml.safe_load((CONF_DIR / "reward" / "gsm8k_stack.yaml").read_text())["weights"]
# the prompt's format with a one-line and a two-line reasoning
ONE_LINE = "<reasoning>\n48 + 24 = 72\n</reasoning>\n<answer>\n72\n</answer>\n"
TWO_LINES = "<reasoning>\n48 / 2 = 24\n48 + 24 = 72\n</reasoning>\n<answer>\n72\n</answer>\n"

# (completion, the #### text as written, the write-up's five values, the gist's (strict, soft),
# gsm8k_stack's five at the recipe's weights): correctness, integer, strict format, soft format, XML count
CASES = [
    # the prompt's format: re.DOTALL lets both patterns cross lines; the gist's soft pattern needs its tags on one line
    (ONE_LINE, "72", (2.0, 0.5, 0.5, 0.5, 0.5), (0.5, 0.0), (2.0, 0.5, 0.5, 0.5, 0.5)),
    # a reasoning of two lines: the gist's strict `.*?` cannot cross its line either; the write-up's can
    (TWO_LINES, "72", (2.0, 0.5, 0.5, 0.5, 0.5), (0.0, 0.0), (2.0, 0.5, 0.5, 0.5, 0.5)),
    # the right number with a thousands comma: the string match fails it, isdigit refuses the comma; the XML count
    # gives one tag (\n</answer>) and 0.001 back for the text after it, which is none (len - 1 = -1)
    ("<answer>\n1,000\n</answer>", "1000", (0.0, 0.0, 0.0, 0.0, 0.126), (0.0, 0.0), (2.0, 0.5, 0.0, 0.0, 0.125)),
    # a negative answer: isdigit refuses the sign (the number is whole)
    ("<answer>\n-3\n</answer>\n", "-3", (2.0, 0.0, 0.0, 0.0, 0.125), (0.0, 0.0), (2.0, 0.5, 0.0, 0.0, 0.125)),
    # a superscript two: isdigit takes it; it is no number to the grader
    ("<answer>\n²\n</answer>\n", "2", (0.0, 0.5, 0.0, 0.0, 0.125), (0.0, 0.0), (0.0, 0.0, 0.0, 0.0, 0.125)),
    # an answer block never closed (a cut-off completion): the recipe reads its tail as the answer
    ("<answer>\n72", "72", (2.0, 0.5, 0.0, 0.0, 0.0), (0.0, 0.0), (0.0, 0.0, 0.0, 0.0, 0.0)),
    # ends at </answer> (TRL strips the end token): the recipe's \n<answer>\n term takes 0.001 a character of it
    # all (59), its \n</answer> term gives 0.001 back
    (ONE_LINE.rstrip("\n"), "72", (2.0, 0.5, 0.5, 0.5, 0.5 - 0.059 + 0.001), (0.5, 0.0), (2.0, 0.5, 0.5, 0.5, 0.5)),
    # text before the tags, all on one line: the recipe searches anywhere, the stack wants the format from the start
    ("Sure. <reasoning>48 + 24</reasoning> <answer>72</answer>", "72", (2.0, 0.5, 0.0, 0.5, 0.0), (0.0, 0.5),
     (2.0, 0.5, 0.0, 0.0, 0.0)),
    # text before the prompt's format on lines of its own: the write-up's search finds it across lines, the gist's
    # cannot; the strict format (from the start) and the stack's soft format (at the start) refuse the preamble
    ("Sure.\n" + TWO_LINES, "72", (2.0, 0.5, 0.0, 0.5, 0.5), (0.0, 0.0), (2.0, 0.5, 0.0, 0.0, 0.5)),
    # two lines of text after the answer: the strict `$` refuses them in all three; the recipe's XML count takes
    # 0.001 a character twice (11 after \n</answer>\n, 11 + 1 after \n</answer>, less the one it gives back)
    (ONE_LINE + "Thanks!\nBye", "72", (2.0, 0.5, 0.0, 0.5, 0.5 - 0.011 - 0.011), (0.0, 0.0),
     (2.0, 0.5, 0.0, 0.5, 0.489)),
]


def the_write_ups_five(completion: str, answer_text: str) -> tuple:
    """The write-up's five functions, written out here from its text (the format patterns with re.DOTALL), as
    an oracle independent of rewards.py's verbatim code."""
    answer = extract_xml_answer(completion)
    xml = sum(0.125 for tag in ("<reasoning>\n", "\n</reasoning>\n", "\n<answer>\n", "\n</answer>")
              if completion.count(tag) == 1)
    if completion.count("\n<answer>\n") == 1:
        xml -= len(completion.split("\n</answer>\n")[-1]) * 0.001
    if completion.count("\n</answer>") == 1:
        xml -= (len(completion.split("\n</answer>")[-1]) - 1) * 0.001
    return (2.0 if answer == answer_text else 0.0, 0.5 if answer.isdigit() else 0.0,
            0.5 if re.match(STRICT_FORMAT, completion, flags=re.DOTALL) else 0.0,
            0.5 if re.search(SOFT_FORMAT, completion, flags=re.DOTALL) else 0.0, xml)


@pytest.mark.parametrize(("completion", "answer_text", "write_up", "gist", "stack"), CASES)
def test_the_write_up_the_gist_and_the_stack_part_where_the_docs_say(completion, answer_text, write_up, gist, stack):
    columns = {"answer": [answer_text], "answer_text": [answer_text]}  # GSM8K's #### texts are plain numbers
    ours = tuple(RECIPE_WEIGHTS[name] * f([completion], **columns)[0] for name, f in REWARD_FUNCTIONS.items())
    recipe = tuple(f([completion], **columns)[0] for f in VERBATIM_FUNCTIONS.values())
    gist_formats = tuple(f([completion])[0] for f in GIST_FORMAT_FUNCTIONS.values())
    assert recipe == pytest.approx(write_up) and gist_formats == pytest.approx(gist) and ours == pytest.approx(stack)
    assert recipe == pytest.approx(the_write_ups_five(completion, answer_text)), "value for value the write-up's"


@pytest.mark.parametrize(("preset", "names"), [
    # the write-up's five, each logged under its key
    ("gsm8k_stack_verbatim", ["recipe_correctness", "recipe_int", "recipe_strict_format", "recipe_soft_format",
                              "recipe_xmlcount"]),
    # the same with the gist's two format readings in their place (in the task's order of components: after them)
    ("gsm8k_stack_gist", ["recipe_correctness", "recipe_int", "recipe_xmlcount", "gist_strict_format",
                          "gist_soft_format"]),
])
def test_each_preset_runs_its_five_under_their_keys(cache_dir, preset, names):
    cfg = compose_cfg(cache_dir, "+curriculum=gsm8k_grpo", f"reward={preset}")
    funcs, stack = reward_stack(cfg.reward, GSM8KTask(source="sample"), fmt=str(cfg.prompt.fmt),
                                max_completion_length=200)
    assert [f.__name__ for f in funcs] == names == [c.name for c in stack]
    assert [(c.weight, c.source) for c in stack] == [(1.0, "reward.weights")] * 5
    # the prompt's own format: every one of the write-up's; the gist's soft format refuses it (its tags span lines)
    expected = {"gsm8k_stack_verbatim": [2.0, 0.5, 0.5, 0.5, 0.5], "gsm8k_stack_gist": [2.0, 0.5, 0.5, 0.5, 0.0]}
    assert [f([ONE_LINE], answer=["72"], answer_text=["72"])[0] for f in funcs] == expected[preset]


def test_every_record_carries_the_recipes_reference_as_written():
    records = GSM8KTask(source="sample").records("3steps", "train", n=5)
    assert all(r.source["answer"].split("####")[1].strip() == r.columns["answer_text"] for r in records)
