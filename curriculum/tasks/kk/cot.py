"""The published chain of thought: a backtracking search over roles, told step by step.

The search tries each person as a knight, then as a knave. After every guess it asks, for each
person guessed so far (in person order), whether some completion of the still-open roles keeps
that person's claim true for a knight (false for a knave); the first person for whom none does
is "contradicted". A consistent guess moves on to the next person, preferring the people the
guessed person just talked about; a person with both roles refuted sends the search back. With
bitmasks (see :mod:`curriculum.tasks.kk.solver`) "some completion" is one ``&`` against the mask of
the assignments that agree with the guesses so far.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from curriculum.tasks.kk.english import KNIGHT_KNAVE, claim_text, list_in_words, role_words
from curriculum.tasks.kk.grammar import Statements, StatementsLike, mentioned_people, parse_statements
from curriculum.tasks.kk.solver import all_assignments_mask, knight_masks, statement_mask

COT_HEAD = (
    "Let's think step by step, by considering whether each person is lying "
    "and if that leads to contradiction."
)
COT_FOOT_SOLVED = "This leads to a feasible solution."
COT_FOOT_UNSOLVABLE = "All the configurations lead to contradictions."


@dataclass(frozen=True)
class Guess:
    """``person`` tried as a knight (``knight``) or knave; ``contradicts`` names whose claim broke."""

    person: int
    knight: bool
    contradicts: int | None = None
    contradicted_is_knight: bool = True


@dataclass(frozen=True)
class Backtrack:
    """Both roles of ``exhausted`` (innermost first) failed; ``reconsider`` gets its other role."""

    exhausted: tuple[int, ...]
    reconsider: int


Step = Guess | Backtrack


def _first_contradicted(roles: list, truths: list[int], knights: tuple[int, ...], all_bits: int):
    """The first guessed person whose claim no completion of the open roles can honour, or None."""
    agreeing = all_bits  # assignments that agree with every role guessed so far
    for person, role in enumerate(roles):
        if role is not None:
            agreeing &= knights[person] if role else all_bits ^ knights[person]
    for person, role in enumerate(roles):
        if role is not None and not (truths[person] if role else all_bits ^ truths[person]) & agreeing:
            return person
    return None


def _talked_about_first(remaining: list[int], mentioned: list[int]) -> list[int]:
    front = [person for person in mentioned if person in remaining]
    return front + [person for person in remaining if person not in front]


def search_steps(parsed: Statements) -> tuple[list[Step], bool]:
    """The search's steps for validated statements, and whether it ended in a solution."""
    n_people = len(parsed)
    knights, all_bits = knight_masks(n_people), all_assignments_mask(n_people)
    truths = [statement_mask(stmt, knights, all_bits) for stmt in parsed]
    mentioned = [mentioned_people(stmt) for stmt in parsed]
    order = list(range(n_people))
    roles: list[bool | None] = [None] * n_people
    tried = [0] * n_people  # roles tried so far per person: 1 = knight, 2 = knight and knave
    steps: list[Step] = []
    cursor = 0
    while cursor < n_people:
        if tried[order[cursor]] == 2:
            exhausted = []
            while cursor >= 0 and tried[order[cursor]] == 2:
                tried[order[cursor]], roles[order[cursor]] = 0, None
                exhausted.append(order[cursor])
                cursor -= 1
            if cursor < 0:
                return steps, False
            steps.append(Backtrack(tuple(exhausted), order[cursor]))
        person = order[cursor]
        roles[person] = tried[person] == 0  # knight first, as published
        tried[person] += 1
        contradicted = _first_contradicted(roles, truths, knights, all_bits)
        if contradicted is None:
            steps.append(Guess(person, roles[person]))
            cursor += 1
            # As published, this order persists through backtracking (it is never restored);
            # the published chains of thought depend on that.
            order[cursor:] = _talked_about_first(order[cursor:], mentioned[person])
        else:
            steps.append(Guess(person, roles[person], contradicted, roles[contradicted]))
    return steps, True


def _step_text(step: Step, names: Sequence[str], claims: Sequence[str], words: dict[str, str]) -> str:
    if isinstance(step, Backtrack):
        exhausted = [names[person] for person in step.exhausted]
        listed = " and ".join(exhausted) if len(exhausted) == 2 else list_in_words(exhausted)
        return (f"We have exhausted all possibilities for {listed}, "
                f"so let us go back and reconsider {names[step.reconsider]}.")
    role = words["a_knight"] if step.knight else words["a_knave"]
    name = names[step.person]
    if step.contradicts is None:
        false = "" if step.knight else "false "
        claim = claims[step.person]
        return f"Assume {name} is {role}. No contradiction is found in their {false}claim that {claim}."
    false = "" if step.contradicted_is_knight else "false "
    whose = "their own" if step.contradicts == step.person else names[step.contradicts]
    return (f"{name} cannot be {role}, because this would contradict the {false}claim of {whose} "
            f"that {claims[step.contradicts]}.")


def chain_of_thought(
    statements: StatementsLike, names: Sequence[str], knight_knave: dict[str, str] | None = None
) -> tuple[str, list[str], str]:
    """``(cot_head, cot_repeat_steps, cot_foot)`` as published, claims repeated in every step.

    >>> head, steps, foot = chain_of_thought("(('lying', 1), ('telling-truth', 0))", ["Zoey", "Oliver"])
    >>> print("\\n".join(steps))  # doctest: +ELLIPSIS
    Assume Zoey is a knight. No contradiction is found in their claim that Oliver is a knave.
    Oliver cannot be a knight, because this would contradict the claim of Zoey that Oliver is a knave.
    Oliver cannot be a knave, because this would contradict the false claim of their own that Zoey...
    We have exhausted all possibilities for Oliver, so let us go back and reconsider Zoey.
    Assume Zoey is a knave. No contradiction is found in their false claim that Oliver is a knave.
    Oliver cannot be a knight, because this would contradict the claim of their own that Zoey is a knight.
    Oliver cannot be a knave, because this would contradict the false claim of Zoey that Oliver is a knave.
    >>> foot
    'All the configurations lead to contradictions.'
    """
    parsed = parse_statements(statements)
    words = knight_knave if knight_knave is not None else role_words(KNIGHT_KNAVE)
    claims = [claim_text(stmt, names, words) for stmt in parsed]
    steps, foot = told_search(parsed, names, claims, words)
    return COT_HEAD, steps, foot


def told_search(
    parsed: Statements, names: Sequence[str], claims: Sequence[str], words: dict[str, str]
) -> tuple[list[str], str]:
    """The search's steps in words and its closing line, for callers that already have the claims."""
    steps, solved = search_steps(parsed)
    texts = [_step_text(step, names, claims, words) for step in steps]
    return texts, COT_FOOT_SOLVED if solved else COT_FOOT_UNSOLVABLE
