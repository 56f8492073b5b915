"""The five rewards of the GSM8K GRPO recipe, one function each, TRL's form: pure, batched,
``f(completions, **columns) -> list[float]`` (`answer` is the reference column; other keyword
arguments TRL passes, such as prompts or trainer_state, are ignored).

Each returns a unit score; the recipe's values are the weights (conf/reward/gsm8k_stack.yaml),
so a sweep over the weights searches the stack:

- `correctness_reward`: 1 when the final answer block's number equals the ``####`` answer
  (`curriculum.tasks.gsm8k.grader.grade`); weight 2.0.
- `integer_reward`: 1 when the final answer block is one number written without a decimal part
  (right or wrong: it teaches the answer's form); weight 0.5. The recipe's ``str.isdigit`` also
  refused "-3" and "1,000" and accepted "²"; here the grader's reading decides, one rule for all five.
- `strict_format_reward`: 1 on the recipe's strict regex (grader.STRICT_FORMAT); weight 0.5.
- `soft_format_reward`: 1 on the soft regex (grader.SOFT_FORMAT); weight 0.5.
- `xml_count_reward`: a quarter for each of ``<reasoning>\\n``, ``\\n</reasoning>\\n``,
  ``\\n<answer>\\n``, ``\\n</answer>`` present exactly once, minus 0.002 per character after
  ``</answer>`` (one newline there is free); weight 0.5, so 0.125 per tag and 0.001 per character,
  the recipe's values. The recipe's `count_xml` also subtracted, under its ``\\n<answer>\\n`` term,
  0.001 per character after ``\\n</answer>\\n``; a completion ending at ``</answer>`` (TRL strips
  the end-of-sequence token) has no such text, so that split returned the whole completion and
  a well-formed answer lost 0.001 per character of everything it wrote. Here the text after
  ``</answer>`` is counted once.

`verbatim.py` (``reward=gsm8k_stack_verbatim``) keeps the recipe's code as it is, for reproduction.
"""

from __future__ import annotations

from curriculum.tasks.base import RewardFunc, completion_text, final_answer_block
from curriculum.tasks.gsm8k.grader import grade, read_number, soft_format, strict_format

XML_TAGS = ("<reasoning>\n", "\n</reasoning>\n", "\n<answer>\n", "\n</answer>")
#: Unit penalty per character after </answer> (0.001 at the recipe's weight 0.5).
XML_TRAILING_PENALTY = 0.002


def correctness_reward(completions, answer, **kwargs) -> list[float]:
    """1.0 when the answer block's number equals the reference, else 0.0.

    >>> correctness_reward(["<answer>\\n1,000\\n</answer>", "<answer>\\n999\\n</answer>"], ["1000", "1000"])
    [1.0, 0.0]
    """
    return [float(grade(c, a).correct) for c, a in zip(completions, answer, strict=True)]


def integer_reward(completions, **kwargs) -> list[float]:
    """1.0 when the answer block is one number written without a decimal part, else 0.0.

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
    """1.0 on the strict format, else 0.0.

    >>> strict_format_reward(["<reasoning>\\na\\nb\\n</reasoning>\\n<answer>\\n5\\n</answer>", "<answer>5</answer>"])
    [1.0, 0.0]
    """
    return [float(strict_format(completion_text(c))) for c in completions]


def soft_format_reward(completions, **kwargs) -> list[float]:
    """1.0 on the soft format, else 0.0.

    >>> soft_format_reward(["<reasoning>a</reasoning> <answer>5</answer>", "<answer>5</answer>"])
    [1.0, 0.0]
    """
    return [float(soft_format(completion_text(c))) for c in completions]


def xml_count(text: str) -> float:
    """A quarter per tag present exactly once, minus XML_TRAILING_PENALTY per character after </answer>.

    >>> xml_count("<reasoning>\\nr\\n</reasoning>\\n<answer>\\n5\\n</answer>\\n"), xml_count("<answer>5</answer>")
    (1.0, 0.0)
    """
    counted = [text.count(tag) == 1 for tag in XML_TAGS]
    score = 0.25 * sum(counted)
    if counted[-1]:
        after = text.split(XML_TAGS[-1])[-1]
        score -= XML_TRAILING_PENALTY * len(after.removeprefix("\n"))
    return round(score, 6)  # 0.25 - 0.002 * 3 is 0.24399999...; six digits keep the documented values exact


def xml_count_reward(completions, **kwargs) -> list[float]:
    """`xml_count` of each completion.

    >>> xml_count_reward(["<reasoning>\\nr\\n</reasoning>\\n<answer>\\n5\\n</answer>\\nbye"])
    [0.994]
    """
    return [xml_count(completion_text(c)) for c in completions]


REWARD_FUNCTIONS: dict[str, RewardFunc] = {
    "correctness": correctness_reward,
    "integer": integer_reward,
    "strict_format": strict_format_reward,
    "soft_format": soft_format_reward,
    "xml_count": xml_count_reward,
}
