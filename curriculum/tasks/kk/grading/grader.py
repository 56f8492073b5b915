"""The one grader (`grade`: training rewards and reported accuracy both call it), and what validation adds: whether
the reasoning agrees with the answer (`check_reasoning`) and lenient accuracy (`lenient_grade`, never a reward).

`grade` runs two linear passes (no regex that can backtrack). **Tags**: the format's tags each once, in order,
only whitespace after `</answer>` (text before `<think>` or between `</think>` and `<answer>` is allowed, as in
Logic-RL); an answer only inside `<think>`, or never closed, is no answer; logic_rl's prompt pre-fills `<think>`.
**Answer text**: each block is read by `answer.parse_answer`; a person two blocks give different roles is
undecided, so several blocks are never more right than one. `correct` also needs no one outside the puzzle given
a role (a reward must never teach a model to invent people).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from curriculum.tasks.base import completion_text
from curriculum.tasks.kk.grading.answer import parse_answer
from curriculum.tasks.kk.grading.claim_words import KIND
from curriculum.tasks.kk.grading.claims import read_claims

FORMATS = ("think_answer", "answer_only", "logic_rl")
_ROLE = {True: "knight", False: "knave"}
_TAG = re.compile(r"</?(?:think|answer)>")
_TAGS = ("<think>", "</think>", "<answer>", "</answer>")
_EXPECTED = {"think_answer": _TAGS, "answer_only": _TAGS[2:], "logic_rl": _TAGS}


@dataclass(frozen=True)
class Grade:
    """The verdict on one completion."""

    correct: bool  # every person decided and equal to the solution (format not required)
    format_ok: bool  # the format's tags each exactly once, in order, only whitespace after </answer>
    partial_format: bool  # not format_ok, but some of the format's own tags there: the tiered rewards' half format
    think_ok: bool  # a <think> block with non-whitespace content is present
    answered: bool  # a closed <answer> block was found outside <think>
    assignment: dict[str, bool | None]  # name -> knight (True), knave (False), None (missing, hedged, both)
    n_right: int  # people whose parsed role equals the solution
    reasons: tuple[str, ...]  # why anything is not right ("no <answer> block", "Zoey given both roles")
    invented: tuple[str, ...] = ()  # people not in the puzzle the answer gives a role (lower-case): wrong

    @property
    def complete(self) -> bool:
        """Every person was given exactly one role (right or wrong)."""
        return all(role is not None for role in self.assignment.values())


def _nfc(text: str) -> str:
    """Composed Unicode (NFC); ASCII, the common case, is already composed."""
    return text if text.isascii() else unicodedata.normalize("NFC", text)


def _read_tags(text: str, fmt: str) -> tuple[list[str], bool, list[str], bool, bool]:
    """One pass over the tags: (format reasons, partial format, answer blocks outside <think>, answer seen
    inside <think>, a non-empty think block present)."""
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
    expected = _EXPECTED[fmt]
    reasons = []
    if tuple(t.group() for t in tags) != expected:
        reasons.append(f"format: want {''.join(expected)}, each once, in order")
    if tags and tags[-1].group() == "</answer>" and text[tags[-1].end():].strip():
        reasons.append("format: text after </answer>")
    own_tags = tags[1:] if fmt == "logic_rl" else tags  # the pre-filled <think> is not the model's
    partial_format = bool(reasons) and any(t.group() in expected for t in own_tags)
    return reasons, partial_format, blocks, answer_in_think, think_ok


def _combine_blocks(blocks: list[str], names: Sequence[str]) -> tuple[dict[str, bool | None], list[str],
                                                                     tuple[str, ...]]:
    """The final block's assignment and invented people, anyone two blocks give different roles undecided."""
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
    reasons, partial_format, blocks, answer_in_think, think_ok = _read_tags(checked, fmt)
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
    return Grade(correct=bool(blocks) and n_right == len(names) and not invented, format_ok=not reasons,
                 partial_format=partial_format, think_ok=think_ok, answered=bool(blocks), assignment=assignment,
                 n_right=n_right, reasons=tuple(reasons + answer_reasons), invented=invented)


@dataclass(frozen=True)
class ReasoningCheck:
    """The reasoning of one completion against its answer (settling nobody, it neither agrees nor disagrees)."""

    has_reasoning: bool  # a closed <think> block with non-whitespace text
    settled: dict[str, bool | None]  # name -> the last definite claim about that person (None: never settled)
    agrees: bool  # it settles someone, and the answer gives each person it settles that role
    invented: tuple[str, ...]  # people not in the puzzle that the reasoning names (a K&K first name) or gives a role
    settles: bool = False  # it settles at least one person


def check_reasoning(text: str, names: Sequence[str], answer: Mapping[str, bool | None], fmt: str) -> ReasoningCheck:
    """The reasoning of `text` (its first closed <think> block; logic_rl pre-fills <think>) against the grader's
    `answer`: a right answer reached by wrong reasoning, or invented people, are invisible to accuracy.

    >>> names = ["Aiden", "Zoey"]
    >>> r = check_reasoning("<think>Suppose Aiden lies. Then Zoey is a knight. So Aiden is a knave.</think>",
    ...                     names, {"Aiden": True, "Zoey": True}, "think_answer")
    >>> r.settled, r.settles, r.agrees
    ({'Aiden': False, 'Zoey': True}, True, False)
    >>> r = check_reasoning("<think>Let me read the statements.</think>", names, {"Aiden": True}, "think_answer")
    >>> r.has_reasoning, r.settles, r.agrees
    (True, False, False)
    >>> check_reasoning("Zoey lies.</think><answer>x</answer>", ["Zoey"], {}, "logic_rl").settled
    {'Zoey': False}
    >>> check_reasoning("<think>Zoey lies, cut off", ["Zoey"], {}, "think_answer").has_reasoning
    False
    """
    if fmt == "logic_rl":
        text = "<think>" + text
    start = text.find("<think>")
    end = text.find("</think>", start) if start >= 0 else -1
    block = text[start + len("<think>"):end] if end >= 0 else ""
    if not block.strip():
        return ReasoningCheck(False, dict.fromkeys(names), False, ())
    claims = read_claims(block, names)
    settled = claims.last()
    settles = any(role is not None for role in settled.values())
    agrees = settles and all(answer.get(name) is role for name, role in settled.items() if role is not None)
    named = [word for word in claims.invented if KIND.get(word) == "stranger"]
    return ReasoningCheck(True, settled, agrees, tuple(dict.fromkeys([*named, *claims.invented_with_roles()])),
                          settles)


MAX_LINES = 20  # a conclusion is short; a tail longer than this is reasoning, not a conclusion


@dataclass(frozen=True)
class Lenient:
    """The lenient verdict: right, the assignment it read (name -> role or None), and why not."""

    correct: bool
    assignment: dict[str, bool | None]
    reason: str = ""


def lenient_grade(text: str, names: Sequence[str], solution: Sequence[bool], strict: Grade) -> Lenient:
    """The strict verdict given a closed <answer> block; else (instruct models answer in prose) the shortest tail of
    `MAX_LINES` at most after </think> that decides everyone, the first tail `parse_answer` refuses being wrong.

    >>> names, solution = ["Zoey", "Oliver"], [False, True]
    >>> text = "<think>Zoey is a knight.</think>Zoey's claim is false.\\nSo Zoey is a knave and Oliver is a knight."
    >>> lenient_grade(text, names, solution, grade(text, names, solution)).correct
    True
    """
    if strict.answered:  # a tagged answer is the answer: the lenient reading never overrides it
        return Lenient(strict.correct, dict(strict.assignment), "" if strict.correct else "the tagged answer")
    conclusion = _TAG.sub("\n", text.rsplit("</think>", 1)[-1]).strip()  # the reasoning is not the answer
    lines = [line for line in conclusion.splitlines() if line.strip()]
    for k in range(1, min(len(lines), MAX_LINES) + 1):
        parsed = parse_answer("\n".join(lines[-k:]), names)
        refused = parsed.invented or any(not reason.endswith(" missing") for reason in parsed.reasons)
        if refused:
            return Lenient(False, parsed.assignment, "; ".join(parsed.reasons))
        if all(role is not None for role in parsed.assignment.values()):
            right = all(parsed.assignment[n] is bool(s) for n, s in zip(names, solution, strict=True))
            return Lenient(right, parsed.assignment, "" if right else "the conclusion is wrong")
    return Lenient(False, dict.fromkeys(names), f"no conclusion in the last {MAX_LINES} lines decides everyone")
