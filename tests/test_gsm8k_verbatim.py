"""reward=gsm8k_stack_verbatim: the recipe's five rewards as its code writes them, beside reward=gsm8k_stack on
the same completions; each row says where the two part and why (docs/tasks.md's table of differences)."""

from __future__ import annotations

import pytest

from curriculum.tasks.gsm8k import GSM8KTask
from curriculum.tasks.gsm8k.rewards import RECIPE_WEIGHTS, REWARD_FUNCTIONS
from curriculum.tasks.gsm8k.verbatim import VERBATIM_FUNCTIONS
from tests.conftest import compose_cfg
from train.rewards.reward_group import task_reward_funcs

# the prompt's format with a one-line and a two-line reasoning
ONE_LINE = "<reasoning>\n48 + 24 = 72\n</reasoning>\n<answer>\n72\n</answer>\n"
TWO_LINES = "<reasoning>\n48 / 2 = 24\n48 + 24 = 72\n</reasoning>\n<answer>\n72\n</answer>\n"

# (completion, the #### text as written, recipe's five values, gsm8k_stack's five at the recipe's weights):
# correctness, integer, strict format, soft format, XML count
CASES = [
    # the prompt's format: the recipe's soft pattern (no re.DOTALL) matches only tags on one line, never this
    (ONE_LINE, "72", (2.0, 0.5, 0.5, 0.0, 0.5), (2.0, 0.5, 0.5, 0.5, 0.5)),
    # a reasoning of two lines: the recipe's strict `.*?` cannot cross its line either
    (TWO_LINES, "72", (2.0, 0.5, 0.0, 0.0, 0.5), (2.0, 0.5, 0.5, 0.5, 0.5)),
    # the right number with a thousands comma: the string match fails it, isdigit refuses the comma; the XML count
    # gives one tag (\n</answer>) and 0.001 back for the text after it, which is none (len - 1 = -1)
    ("<answer>\n1,000\n</answer>", "1000", (0.0, 0.0, 0.0, 0.0, 0.126), (2.0, 0.5, 0.0, 0.0, 0.125)),
    # a negative answer: isdigit refuses the sign (the number is whole)
    ("<answer>\n-3\n</answer>\n", "-3", (2.0, 0.0, 0.0, 0.0, 0.125), (2.0, 0.5, 0.0, 0.0, 0.125)),
    # a superscript two: isdigit takes it; it is no number to the grader
    ("<answer>\n²\n</answer>\n", "2", (0.0, 0.5, 0.0, 0.0, 0.125), (0.0, 0.0, 0.0, 0.0, 0.125)),
    # an answer block never closed (a cut-off completion): the recipe reads its tail as the answer
    ("<answer>\n72", "72", (2.0, 0.5, 0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 0.0, 0.0)),
    # ends at </answer> (TRL strips the end token): the recipe's \n<answer>\n term takes 0.001 a character of it
    # all (59), its \n</answer> term gives 0.001 back
    (ONE_LINE.rstrip("\n"), "72", (2.0, 0.5, 0.5, 0.0, 0.5 - 0.059 + 0.001), (2.0, 0.5, 0.5, 0.5, 0.5)),
    # text before the tags, all on one line: the recipe searches anywhere, the stack wants the format from the start
    ("Sure. <reasoning>48 + 24</reasoning> <answer>72</answer>", "72", (2.0, 0.5, 0.0, 0.5, 0.0),
     (2.0, 0.5, 0.0, 0.0, 0.0)),
]


@pytest.mark.parametrize(("completion", "answer_text", "verbatim", "stack"), CASES)
def test_the_recipes_code_and_the_stack_part_where_the_readme_says(completion, answer_text, verbatim, stack):
    columns = {"answer": [answer_text], "answer_text": [answer_text]}  # GSM8K's #### texts are plain numbers
    ours = tuple(RECIPE_WEIGHTS[name] * f([completion], **columns)[0] for name, f in REWARD_FUNCTIONS.items())
    recipe = tuple(f([completion], **columns)[0] for f in VERBATIM_FUNCTIONS.values())
    assert recipe == pytest.approx(verbatim) and ours == pytest.approx(stack)


def test_the_preset_runs_the_recipes_five_as_written_and_logs_them_by_its_names(cache_dir):
    cfg = compose_cfg(cache_dir, "+curriculum=gsm8k_grpo", "reward=gsm8k_stack_verbatim")
    funcs, weights = task_reward_funcs(cfg.reward, GSM8KTask(source="sample"), fmt=str(cfg.prompt.fmt),
                                       max_completion_length=200)
    assert [f.__name__ for f in funcs] == ["correctness_reward_func", "int_reward_func", "strict_format_reward_func",
                                           "soft_format_reward_func", "xmlcount_reward_func"]
    assert weights == [1.0] * 5
    # the prompt's own format: all but the soft format (its tags span lines), as the table's first row
    assert [f([ONE_LINE], answer=["72"], answer_text=["72"]) for f in funcs] == [[2.0], [0.5], [0.5], [0.0], [0.5]]


def test_every_record_carries_the_recipes_reference_as_written():
    records = GSM8KTask(source="sample").records("3steps", "train", n=5)
    assert all(r.source["answer"].split("####")[1].strip() == r.columns["answer_text"] for r in records)
