"""The one grader: training rewards and reported validation accuracy both call `grade`.

Parsing approach, in two layers, each a single linear pass (no regex that can backtrack):

1. **Tags.** One scan finds every literal `<think>`, `</think>`, `<answer>`, `</answer>`. The tag
   sequence decides the format: for the format's tags, each exactly once, in order, and nothing but
   whitespace after `</answer>` (text before `<think>` or between `</think>` and `<answer>` is
   allowed, as in Logic-RL). The same walk collects the closed `<answer>` blocks that lie outside
   any `<think>` block: an answer only inside `<think>`, or a block never closed, is no answer.
   For fmt "logic_rl" the prompt pre-fills `<think>`, so the walk runs over `"<think>" + completion`
   and a second `<think>` from the model breaks the format.
2. **Answer text.** `curriculum.tasks.kk.grading.answer_parse.parse_answer` tokenizes each block and binds names
   to roles with the claims parser shared with validation (`curriculum.tasks.kk.grading.claims`; the docstrings list
   the phrasings and refusals). The final block is the answer; a person whom two blocks give different roles is
   undecided ("answer blocks disagree"), so several blocks can never be more right than one.

`correct` is judged on the answer alone (every person decided and equal to the solution, and no one
outside the puzzle given a role: a reward must never teach a model to invent people); format is
reported separately in `format_ok` (Logic-RL's validation criterion asks for both). Rewards decide
how to combine them (`train/rewards/reward_group.py`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from curriculum.tasks.base import completion_text
from curriculum.tasks.kk.grading.answer_parse import parse_answer

FORMATS = ("think_answer", "answer_only", "logic_rl")
_ROLE = {True: "knight", False: "knave"}
_TAG = re.compile(r"</?(?:think|answer)>")
_EXPECTED = {
    "think_answer": ("<think>", "</think>", "<answer>", "</answer>"),
    "answer_only": ("<answer>", "</answer>"),
    "logic_rl": ("<think>", "</think>", "<answer>", "</answer>"),
}


@dataclass(frozen=True)
class Grade:
    """The verdict on one completion.

    correct: every person decided and equal to the solution (format not required).
    format_ok: the format's tags each exactly once, in order, only whitespace after </answer>.
    partial_format: not format_ok, but the completion holds at least one of the format's tags
        (for "logic_rl" the pre-filled <think> does not count): the tiered rewards' "half format".
    think_ok: a <think> block with non-whitespace content is present.
    answered: a closed <answer> block was found outside <think>.
    assignment: name -> True (knight) / False (knave) / None (missing, hedged or contradictory).
    n_right: people whose parsed role equals the solution.
    reasons: why anything is not right, e.g. "no <answer> block", "Zoey given both roles".
    invented: people not in the puzzle whom the answer gives a role (lower-case); any makes it wrong.
    """

    correct: bool
    format_ok: bool
    partial_format: bool
    think_ok: bool
    answered: bool
    assignment: dict[str, bool | None]
    n_right: int
    reasons: tuple[str, ...]
    invented: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        """Every person was given exactly one role (right or wrong)."""
        return all(role is not None for role in self.assignment.values())


def _nfc(text: str) -> str:
    """Composed Unicode (NFC); ASCII, the common case, is already composed."""
    return text if text.isascii() else unicodedata.normalize("NFC", text)


def _walk_tags(text: str) -> tuple[list[re.Match], list[str], bool, bool]:
    """One pass over the tags: (tags, answer blocks outside <think>, answer seen inside <think>,
    a non-empty think block present)."""
    tags = list(_TAG.finditer(text))
    blocks: list[str] = []
    in_think, answer_in_think, think_ok = False, False, False
    think_at = answer_at = None
    for tag in tags:
        name = tag.group()
        if name == "<think>" and not in_think:
            in_think, think_at, answer_at = True, tag.end(), None
        elif name == "</think>" and in_think:
            in_think = False
            think_ok = think_ok or bool(text[think_at:tag.start()].strip())
        elif in_think:
            answer_in_think = answer_in_think or name == "<answer>"
        elif name == "<answer>":
            answer_at = tag.end()  # a re-opened block restarts: the latest opener wins
        elif name == "</answer>" and answer_at is not None:
            blocks.append(text[answer_at:tag.start()])
            answer_at = None
    return tags, blocks, answer_in_think, think_ok


def _format_reasons(text: str, tags: list[re.Match], fmt: str) -> list[str]:
    expected = _EXPECTED[fmt]
    reasons = []
    if tuple(t.group() for t in tags) != expected:
        reasons.append(f"format: want {''.join(expected)}, each once, in order")
    if tags and tags[-1].group() == "</answer>" and text[tags[-1].end():].strip():
        reasons.append("format: text after </answer>")
    return reasons


def _combine_blocks(blocks: list[str], names: Sequence[str]) -> tuple[dict[str, bool | None], list[str],
                                                                     tuple[str, ...]]:
    """The final block's assignment (and invented people), with anyone whom two blocks give different
    roles undecided."""
    parsed = [parse_answer(block, names) for block in blocks]
    if len(parsed) == 1:  # the common case: nothing to disagree with
        return parsed[0].assignment, list(parsed[0].reasons), parsed[0].invented
    final = dict(parsed[-1].assignment)
    reasons = list(parsed[-1].reasons)
    for name in names:
        roles = {p.assignment[name] for p in parsed} - {None}
        if len(roles) > 1:
            final[name] = None
            reasons.append(f"answer blocks disagree on {name}")
    return final, reasons, parsed[-1].invented


def grade(completion, names: Sequence[str], solution: Sequence[bool], *, fmt: str = "think_answer") -> Grade:
    """Grade one completion against the puzzle's `names` and `solution` (True = knight).

    >>> g = grade("<think>Zoey lies.</think><answer>(1) Zoey is a knave\\n(2) Oliver is a knight</answer>",
    ...           ["Zoey", "Oliver"], [False, True])
    >>> g.correct, g.format_ok, g.assignment
    (True, True, {'Zoey': False, 'Oliver': True})
    >>> grade("<answer>Zoey is a knight or a knave.</answer>", ["Zoey"], [True], fmt="answer_only").reasons
    ('Zoey hedged',)
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt {fmt!r} is not one of {FORMATS}")
    if names is None or solution is None or isinstance(names, str) or isinstance(solution, str):
        raise ValueError(f"need names and solution as sequences: got names={names!r}, solution={solution!r}")
    # composed Unicode (NFC) on both sides: "Zoë" typed decomposed is the same name
    names, solution = [_nfc(str(n)) for n in names], [bool(s) for s in solution]
    if not names or len(names) != len(solution):
        raise ValueError(f"need one solution entry per person: {len(names)} names, {len(solution)} entries")
    text = _nfc(completion_text(completion))
    checked = "<think>" + text if fmt == "logic_rl" else text
    tags, blocks, answer_in_think, think_ok = _walk_tags(checked)
    reasons = _format_reasons(checked, tags, fmt)
    own_tags = tags[1:] if fmt == "logic_rl" else tags  # the pre-filled <think> is not the model's
    partial_format = bool(reasons) and any(t.group() in _EXPECTED[fmt] for t in own_tags)
    if blocks:
        assignment, answer_reasons, invented = _combine_blocks(blocks, names)
    else:
        assignment, invented = dict.fromkeys(names), ()
        answer_reasons = ["answer only inside <think>" if answer_in_think else "no <answer> block"]
    n_right = 0
    for name, knight in zip(names, solution, strict=True):
        said = assignment[name]
        if said is knight:
            n_right += 1
        elif said is not None:
            answer_reasons.append(f"{name} named a {_ROLE[said]}, but is a {_ROLE[knight]}")
    return Grade(
        correct=bool(blocks) and n_right == len(names) and not invented, format_ok=not reasons,
        partial_format=partial_format, think_ok=think_ok, answered=bool(blocks), assignment=assignment, n_right=n_right,
        reasons=tuple(reasons + answer_reasons), invented=invented,
    )
