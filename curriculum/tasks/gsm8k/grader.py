"""The GSM8K grader: the final `<answer>` block (the last closed one) read as one number and compared exactly.

One number is ASCII digits with an optional leading ``-``, an optional ``$``, comma thousands groups (``1,000``,
never ``1,00``), an optional decimal part and at most one trailing period, compared by canonical text, no float
(``$1,000.`` equals ``1000``); anything else is refused with a reason. The format checks are the recipe's
patterns run as plain scans, linear in a long completion (tests compare them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from curriculum.tasks.base import AnswerGrade, completion_text, final_answer_block

#: The recipe's strict format (one optional newline at the end), applied with re.DOTALL.
STRICT_FORMAT = r"^<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>\n?$"
#: The soft format: the four tags in order, anything around them but before <reasoning> (re.match, re.DOTALL).
SOFT_FORMAT = r"<reasoning>.*?</reasoning>.*?<answer>.*?</answer>"

_NUMBER = re.compile(r"(-)?\$?(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?", re.ASCII)
_STRICT_OPEN, _STRICT_MIDDLE, _STRICT_CLOSE = "<reasoning>\n", "\n</reasoning>\n<answer>\n", "\n</answer>"
_FORMAT_REASON = r"format: not <reasoning>\n...\n</reasoning>\n<answer>\n...\n</answer>"


@dataclass(frozen=True)
class Number:
    """A number read from text. text: canonical ("-1000", "2.5"); whole: written without a decimal part."""

    text: str
    whole: bool


def read_number(text: str) -> Number | None:
    """The one number `text` holds (module docstring), None for anything else.

    >>> read_number(" $1,000. "), read_number("-2.50"), read_number("5 or 6"), read_number("1,00")
    (Number(text='1000', whole=True), Number(text='-2.5', whole=False), None, None)
    """
    stripped = text.strip()
    stripped = stripped[:-1] if stripped.endswith(".") else stripped
    found = _NUMBER.fullmatch(stripped)
    if found is None:
        return None
    sign, whole, fraction = found.groups()
    digits = whole.replace(",", "").lstrip("0") or "0"
    decimals = (fraction or "").rstrip("0")
    canonical = digits + (f".{decimals}" if decimals else "")
    negative = sign is not None and canonical != "0"  # "-0" is 0
    return Number(("-" if negative else "") + canonical, whole=fraction is None)


def reference_answer(solution: str) -> Number | None:
    """The number after ``####`` in a GSM8K reference solution, None when there is none or it is not one.

    >>> reference_answer("Half of 48 is 24.\\n#### 24"), reference_answer("no marker")
    (Number(text='24', whole=True), None)
    """
    _, marker, final = solution.rpartition("####")
    return read_number(final) if marker else None


def strict_format(text: str) -> bool:
    """Whether `text` matches :data:`STRICT_FORMAT` (re.match, re.DOTALL), by three scans (``$`` matches at the end
    or before a final newline, so after ``</answer>`` come at most two newlines).

    >>> strict_format("<reasoning>\\n2+3\\nis 5\\n</reasoning>\\n<answer>\\n5\\n</answer>\\n")
    True
    >>> strict_format("<reasoning>2+3</reasoning><answer>5</answer>")
    False
    """
    trailing = next((end for end in ("", "\n", "\n\n") if text.endswith(_STRICT_CLOSE + end)), None)
    if trailing is None or not text.startswith(_STRICT_OPEN):
        return False
    close_at = len(text) - len(trailing) - len(_STRICT_CLOSE)
    middle = text.find(_STRICT_MIDDLE, len(_STRICT_OPEN))
    return middle >= 0 and middle + len(_STRICT_MIDDLE) <= close_at


def soft_format(text: str) -> bool:
    """Whether `text` matches :data:`SOFT_FORMAT` at its start (re.match, re.DOTALL), by four scans.

    >>> soft_format("<reasoning>2+3</reasoning> so <answer>5</answer> done"), soft_format(" <reasoning>")
    (True, False)
    """
    at = 0
    for tag in ("<reasoning>", "</reasoning>", "<answer>", "</answer>"):
        found = text.find(tag, at)
        if found < 0 or (tag == "<reasoning>" and found != 0):
            return False
        at = found + len(tag)
    return True


def _shown(text: str, limit: int = 60) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "..."


def grade(completion, answer: str) -> AnswerGrade:
    """Grade one completion against the reference `answer`: `correct` needs only the final block's number.

    >>> g = grade("<reasoning>\\n48 / 2 = 24\\n</reasoning>\\n<answer>\\n$24.\\n</answer>", "24")
    >>> g.correct, g.format_ok, g.answer
    (True, True, '24')
    >>> grade("<answer>about 24</answer>", "24").reasons[-1]
    "answer is not one number: 'about 24'"
    """
    reference = read_number(answer)
    if reference is None:
        raise ValueError(f"reference answer {answer!r} is not a number")
    text = completion_text(completion)
    format_ok = strict_format(text)
    reasons = [] if format_ok else [_FORMAT_REASON]
    block = final_answer_block(text)
    if block is None:
        return AnswerGrade(False, format_ok, False, None, 0.0, (*reasons, "no <answer> block"))
    number = read_number(block)
    if number is None:
        reasons.append(f"answer is not one number: {_shown(block)!r}")
    elif number.text != reference.text:
        reasons.append(f"answer {number.text}, but the reference is {reference.text}")
    correct = number is not None and number.text == reference.text
    return AnswerGrade(correct, format_ok, True, None if number is None else number.text, float(correct),
                       tuple(reasons))
