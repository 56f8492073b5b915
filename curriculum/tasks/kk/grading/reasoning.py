"""Does the reasoning agree with the answer? Read with the grader's own claims parser
(`curriculum.tasks.kk.grading.claims`).

A right answer reached by wrong reasoning (the chain concludes "Aiden is a knave", the answer says
knight) and people who never appear in the puzzle are invisible to accuracy; validation reports
them per subset from `check_reasoning` (see `eval.metrics`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from curriculum.tasks.kk.grading.claim_words import KIND
from curriculum.tasks.kk.grading.claims import read_claims

_OPEN, _CLOSE = "<think>", "</think>"


def reasoning_block(text: str, fmt: str) -> str:
    """The reasoning: the text of the first closed <think> block ("" when there is none).

    For fmt "logic_rl" the prompt pre-fills <think>, so the reasoning is the text before </think>.

    >>> reasoning_block("<think>Zoey lies.</think><answer>x</answer>", "think_answer")
    'Zoey lies.'
    >>> reasoning_block("Zoey lies.</think><answer>x</answer>", "logic_rl")
    'Zoey lies.'
    >>> reasoning_block("<think>cut off", "think_answer")
    ''
    """
    if fmt == "logic_rl":
        text = _OPEN + text
    start = text.find(_OPEN)
    end = text.find(_CLOSE, start) if start >= 0 else -1
    return text[start + len(_OPEN):end] if end >= 0 else ""


@dataclass(frozen=True)
class ReasoningCheck:
    """The reasoning of one completion against its answer.

    has_reasoning: a closed <think> block with non-whitespace text.
    settled: name -> the last definite claim about that person in the reasoning (None: never settled).
    settles: the reasoning settles at least one person (one that settles nobody can neither agree nor
        disagree: "Let me think about the statements" is no evidence for the answer).
    agrees: it settles someone, and every person it settles has that role in the answer (people it
        never settles do not count against it; an answer that leaves a settled person undecided does).
    invented: people not in the puzzle that the reasoning names (a K&K first name) or gives a role.
    """

    has_reasoning: bool
    settled: dict[str, bool | None]
    agrees: bool
    invented: tuple[str, ...]
    settles: bool = False


def check_reasoning(text: str, names: Sequence[str], answer: Mapping[str, bool | None], fmt: str) -> ReasoningCheck:
    """Compare the reasoning of completion `text` with the grader's `answer` (name -> role or None).

    >>> names = ["Aiden", "Zoey"]
    >>> r = check_reasoning("<think>Suppose Aiden lies. Then Zoey is a knight. So Aiden is a knave.</think>",
    ...                     names, {"Aiden": True, "Zoey": True}, "think_answer")
    >>> r.settled, r.settles, r.agrees
    ({'Aiden': False, 'Zoey': True}, True, False)
    >>> r = check_reasoning("<think>Let me read the statements.</think>", names, {"Aiden": True}, "think_answer")
    >>> r.has_reasoning, r.settles, r.agrees
    (True, False, False)
    """
    block = reasoning_block(text, fmt)
    if not block.strip():
        return ReasoningCheck(False, dict.fromkeys(names), False, ())
    claims = read_claims(block, names)
    settled = claims.last()
    settles = any(role is not None for role in settled.values())
    agrees = settles and all(answer.get(name) is role for name, role in settled.items() if role is not None)
    named = [word for word in claims.invented if KIND.get(word) == "stranger"]
    return ReasoningCheck(True, settled, agrees, tuple(dict.fromkeys([*named, *claims.invented_with_roles()])),
                          settles)
