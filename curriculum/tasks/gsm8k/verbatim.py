"""The GSM8K recipe's five rewards exactly as its code writes them, for reproduction (`reward=gsm8k_stack_verbatim`).

The write-up the GSM8K system follows: its five functions, its values inside them (2.0, 0.5, 0.5, 0.5, 0.125 a
tag: the preset weighs each 1.0), and its reading where it differs from its words; `rewards.py`
(`reward=gsm8k_stack`, the default) keeps the words. The earlier public gist of the same five read both format
patterns with no flags; `reward=gsm8k_stack_gist` keeps that reading (components `gist_strict_format`,
`gist_soft_format`: a soft format that never rewards a completion of more than one line). Each component is
logged under its key (`rewards/recipe_correctness/mean`). Each difference, and why the default differs, is in
docs/tasks.md ("Other tasks"):

- the answer is the text after the last ``<answer>`` up to the first ``</answer>`` after it, stripped
  (`extract_xml_answer`): a block never closed is read to the end of the completion;
- correctness: that text equal to the text after ``####`` as written (the `answer_text` column), a string
  match: "1,000" is not "1000", "$18" is not "18";
- integer: ``str.isdigit`` of that text: "-3" and "1,000" are refused, "²" is accepted;
- strict format: ``re.match`` of the pattern with ``re.DOTALL``;
- soft format: ``re.search`` (anywhere in the completion) with ``re.DOTALL``; the gist's readings have no flags,
  so ``.`` never crosses a line there;
- XML count: under ``\\n<answer>\\n``, 0.001 per character after ``\\n</answer>\\n`` (when there is no such
  text, as when the completion ends at ``</answer>``, every character), and again under ``\\n</answer>``.
"""

from __future__ import annotations

import re

from curriculum.tasks.base import RewardFunc, completion_text
from curriculum.tasks.gsm8k.grader import SOFT_FORMAT, STRICT_FORMAT


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


def count_xml(text: str) -> float:
    """The recipe's XML count: 0.125 per tag present once, its two penalties for text after the answer.

    >>> well_formed = "<reasoning>\\nr\\n</reasoning>\\n<answer>\\n5\\n</answer>"  # 47 characters, none after it
    >>> round(count_xml(well_formed), 6), round(count_xml(well_formed + "\\n"), 6)  # 0.5 - 0.047 + 0.001
    (0.454, 0.5)
    """
    count = 0.0
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
    return count


def xmlcount_reward_func(completions, **kwargs) -> list[float]:
    """`count_xml` of each completion.

    >>> [round(v, 6) for v in xmlcount_reward_func(["<reasoning>\\nr\\n</reasoning>\\n<answer>\\n5\\n</answer>\\n"])]
    [0.5]
    """
    return [count_xml(completion_text(c)) for c in completions]


#: component name -> function: the write-up's five, as `reward=gsm8k_stack_verbatim` weighs them (1.0 each)
VERBATIM_FUNCTIONS: dict[str, RewardFunc] = {
    "recipe_correctness": correctness_reward_func,
    "recipe_int": int_reward_func,
    "recipe_strict_format": strict_format_reward_func,
    "recipe_soft_format": soft_format_reward_func,
    "recipe_xmlcount": xmlcount_reward_func,
}
#: the gist's two format readings (no flags), which `reward=gsm8k_stack_gist` weighs in place of the write-up's
GIST_FORMAT_FUNCTIONS = {
    "gist_strict_format": gist_strict_format_reward_func,
    "gist_soft_format": gist_soft_format_reward_func,
}
