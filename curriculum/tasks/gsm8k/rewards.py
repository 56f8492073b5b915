"""The GSM8K recipe's five rewards in TRL's form (``f(completions, **columns) -> list[float]``) in three readings
(docs/tasks.md, "Other tasks"): `REWARD_FUNCTIONS` (``reward=gsm8k_stack``, the default), the recipe on the grader's
one reading of the answer, unit scores weighted by the recipe's values (so a sweep over the weights searches the
stack); `VERBATIM_FUNCTIONS` (``reward=gsm8k_stack_verbatim``), the write-up's code, its values inside
(``recipe_*``); `GIST_FORMAT_FUNCTIONS` (``reward=gsm8k_stack_gist``), the earlier gist's two format readings.
"""

from __future__ import annotations

import re

from curriculum.tasks.base import RewardFunc, completion_text, final_answer_block
from curriculum.tasks.gsm8k.grader import SOFT_FORMAT, STRICT_FORMAT, grade, read_number, soft_format, strict_format

XML_TAGS = ("<reasoning>\n", "\n</reasoning>\n", "\n<answer>\n", "\n</answer>")
XML_TRAILING_PENALTY = 0.002  # Unit penalty per character after </answer> (0.001 at the recipe's weight 0.5).


def correctness_reward(completions, answer, **kwargs) -> list[float]:
    """1.0 when the answer block's number equals the reference, else 0.0.

    >>> correctness_reward(["<answer>\\n1,000\\n</answer>", "<answer>\\n999\\n</answer>"], ["1000", "1000"])
    [1.0, 0.0]
    """
    return [float(grade(c, a).correct) for c, a in zip(completions, answer, strict=True)]


def integer_reward(completions, **kwargs) -> list[float]:
    """1.0 when the answer block is one number written without a decimal part (right or wrong), else 0.0.

    >>> integer_reward(["<answer>-3</answer>", "<answer>2.5</answer>", "<answer>three</answer>", "7"])
    [1.0, 0.0, 0.0, 0.0]
    """
    out = []
    for completion in completions:
        block = final_answer_block(completion_text(completion))
        number = None if block is None else read_number(block)
        out.append(float(number is not None and number.whole))
    return out


def strict_format_reward(completions, **kwargs) -> list[float]:
    """1.0 on the strict format (grader.STRICT_FORMAT), else 0.0.

    >>> strict_format_reward(["<reasoning>\\na\\nb\\n</reasoning>\\n<answer>\\n5\\n</answer>", "<answer>5</answer>"])
    [1.0, 0.0]
    """
    return [float(strict_format(completion_text(c))) for c in completions]


def soft_format_reward(completions, **kwargs) -> list[float]:
    """1.0 on the soft format (grader.SOFT_FORMAT), else 0.0.

    >>> soft_format_reward(["<reasoning>a</reasoning> <answer>5</answer>", "<answer>5</answer>"])
    [1.0, 0.0]
    """
    return [float(soft_format(completion_text(c))) for c in completions]


def xml_count_reward(completions, **kwargs) -> list[float]:
    """A quarter per tag of XML_TAGS present once, minus XML_TRAILING_PENALTY a character after </answer> but one.

    >>> xml_count_reward(["<reasoning>\\nr\\n</reasoning>\\n<answer>\\n5\\n</answer>\\nbye", "<answer>5</answer>"])
    [0.994, 0.0]
    """
    out = []
    for completion in completions:
        text = completion_text(completion)
        counted = [text.count(tag) == 1 for tag in XML_TAGS]
        score = 0.25 * sum(counted)
        if counted[-1]:
            score -= XML_TRAILING_PENALTY * len(text.split(XML_TAGS[-1])[-1].removeprefix("\n"))
        out.append(round(score, 6))  # 0.25 - 0.002 * 3 is 0.24399999...; six digits keep the values exact
    return out


def extract_xml_answer(text: str) -> str:
    """The recipe's answer: after the last <answer>, before the first </answer> after it, stripped.

    >>> extract_xml_answer("<answer>\\n4\\n</answer> and <answer> 5 "), extract_xml_answer("no tags")
    ('5', 'no tags')
    """
    answer = text.split("<answer>")[-1]
    answer = answer.split("</answer>")[0]
    return answer.strip()


def correctness_reward_func(completions, answer_text, **kwargs) -> list[float]:
    """2.0 when the answer's text is the ``####`` text, character for character, else 0.0.

    >>> correctness_reward_func(["<answer>\\n72\\n</answer>", "<answer>72.0</answer>", "<answer>72"], ["72"] * 3)
    [2.0, 0.0, 2.0]
    """
    return [2.0 if extract_xml_answer(completion_text(c)) == a else 0.0
            for c, a in zip(completions, answer_text, strict=True)]


def int_reward_func(completions, **kwargs) -> list[float]:
    """0.5 when the answer's text is all digits (`str.isdigit`), else 0.0.

    >>> int_reward_func(["<answer>72</answer>", "<answer>-3</answer>", "<answer>²</answer>"])
    [0.5, 0.0, 0.5]
    """
    return [0.5 if extract_xml_answer(completion_text(c)).isdigit() else 0.0 for c in completions]


def strict_format_reward_func(completions, **kwargs) -> list[float]:
    """0.5 when the completion matches the strict format from its start (`re.match`, `re.DOTALL`), else 0.0.

    >>> strict_format_reward_func(["<reasoning>\\n2+3\\nis 5\\n</reasoning>\\n<answer>\\n5\\n</answer>\\n",
    ...                            "So: <reasoning>\\n5\\n</reasoning>\\n<answer>\\n5\\n</answer>\\n"])
    [0.5, 0.0]
    """
    return [0.5 if re.match(STRICT_FORMAT, completion_text(c), re.DOTALL) else 0.0 for c in completions]


def soft_format_reward_func(completions, **kwargs) -> list[float]:
    """0.5 when the soft format is found anywhere (`re.search`, `re.DOTALL`), else 0.0.

    >>> soft_format_reward_func(["So: <reasoning>5</reasoning> <answer>5</answer>", "<reasoning>\\n5</reasoning>\\n"
    ...                          "<answer>\\n5\\n</answer>", "<answer>5</answer>"])
    [0.5, 0.5, 0.0]
    """
    return [0.5 if re.search(SOFT_FORMAT, completion_text(c), re.DOTALL) else 0.0 for c in completions]


def gist_strict_format_reward_func(completions, **kwargs) -> list[float]:
    """The gist's strict format: `re.match` with no flags, so a reasoning of more than one line never matches.

    >>> gist_strict_format_reward_func(["<reasoning>\\n5\\n</reasoning>\\n<answer>\\n5\\n</answer>\\n",
    ...                                 "<reasoning>\\n2+3\\nis 5\\n</reasoning>\\n<answer>\\n5\\n</answer>\\n"])
    [0.5, 0.0]
    """
    return [0.5 if re.match(STRICT_FORMAT, completion_text(c)) else 0.0 for c in completions]


def gist_soft_format_reward_func(completions, **kwargs) -> list[float]:
    """The gist's soft format: `re.search` with no flags, so its tags must all be on one line.

    >>> gist_soft_format_reward_func(["So: <reasoning>5</reasoning> <answer>5</answer>", "<reasoning>\\n5</reasoning>"])
    [0.5, 0.0]
    """
    return [0.5 if re.search(SOFT_FORMAT, completion_text(c)) else 0.0 for c in completions]


def xmlcount_reward_func(completions, **kwargs) -> list[float]:
    """The recipe's `count_xml` of each completion: 0.125 per tag present once, and its two penalties for text
    after the answer (under ``\\n<answer>\\n`` every character after ``\\n</answer>\\n``, or all when there is none).

    >>> well_formed = "<reasoning>\\nr\\n</reasoning>\\n<answer>\\n5\\n</answer>"  # 47 characters, none after it
    >>> [round(v, 6) for v in xmlcount_reward_func([well_formed, well_formed + "\\n"])]  # 0.5 - 0.047 + 0.001
    [0.454, 0.5]
    """
    out = []
    for completion in completions:
        text, count = completion_text(completion), 0.0
        if text.count("<reasoning>\n") == 1:
            count += 0.125
        if text.count("\n</reasoning>\n") == 1:
            count += 0.125
        if text.count("\n<answer>\n") == 1:
            count += 0.125
            count -= len(text.split("\n</answer>\n")[-1]) * 0.001
        if text.count("\n</answer>") == 1:
            count += 0.125
            count -= (len(text.split("\n</answer>")[-1]) - 1) * 0.001
        out.append(count)
    return out


REWARD_FUNCTIONS: dict[str, RewardFunc] = {
    "correctness": correctness_reward, "integer": integer_reward, "strict_format": strict_format_reward,
    "soft_format": soft_format_reward, "xml_count": xml_count_reward}
#: component name -> function: the write-up's five, as `reward=gsm8k_stack_verbatim` weighs them (1.0 each)
VERBATIM_FUNCTIONS: dict[str, RewardFunc] = {
    "recipe_correctness": correctness_reward_func, "recipe_int": int_reward_func,
    "recipe_strict_format": strict_format_reward_func, "recipe_soft_format": soft_format_reward_func,
    "recipe_xmlcount": xmlcount_reward_func}
#: the gist's two format readings (no flags), which `reward=gsm8k_stack_gist` weighs in place of the write-up's
GIST_FORMAT_FUNCTIONS = {"gist_strict_format": gist_strict_format_reward_func,
                         "gist_soft_format": gist_soft_format_reward_func}
