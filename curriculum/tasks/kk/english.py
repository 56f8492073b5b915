"""The published K&K English, word for word (tests check it against every published record): names, speech
templates, claims, quizzes, solutions, and the chain of thought. That is the published backtracking search: each
person tried as a knight, then a knave; "contradicted", the first person guessed so far whose claim no completion
of the open roles honours (one ``&`` of the solver's bitmasks); a consistent guess moving on, the people the
guessed one talked about first; a person with both roles refuted sending the search back.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from curriculum.tasks.kk.statements import (
    Statement,
    Statements,
    StatementsLike,
    knight_masks,
    mentioned_people,
    parse_statements,
    statement_mask,
)

#: The 51 common first names the published puzzles draw from (without replacement).
COMMON_NAMES = (
    "Emma", "Liam", "Olivia", "Noah", "Ava", "Ethan", "Sophia", "Mason", "Isabella", "William", "Mia", "James",
    "Charlotte", "Benjamin", "Amelia", "Lucas", "Harper", "Henry", "Evelyn", "Alexander", "Abigail", "Michael", "Emily",
    "Daniel", "Elizabeth", "Jacob", "Sofia", "Logan", "Avery", "Jackson", "Ella", "Sebastian", "Scarlett", "Jack",
    "Grace", "Aiden", "Chloe", "Owen", "Victoria", "Samuel", "Riley", "Matthew", "Aria", "Joseph", "Lily", "Luke",
    "Aurora", "David", "Zoey", "Oliver", "Penelope",
)

#: One of these frames each person's statement; ``{content}`` is the claim, ``{name}`` the speaker.
SPEECH_TEMPLATES = (
    "{name} said that {content}.", "{name} told you that {content}.", '{name} said, "{content}."',
    '{name} stated, "{content}".', 'According to {name}, "{content}".', "In {name}'s words: \"{content}\".",
    '{name} remarked, "{content}".', '"{content}," {name} declared.', '{name} was heard saying, "{content}".',
    "{name} expressed that {content}.", '"{content}" - {name}.', 'As {name} put it, "{content}".',
    '{name} asserted: "{content}".', '"{content}," {name} mentioned.', '{name} commented, "{content}".',
    'In a statement by {name}: "{content}".', '{name} noted, "{content}".', '"{content}," {name} claimed.',
)

KNIGHT_KNAVE = ("a knight", "a knave")
RolePair = str | tuple[str, str] | None
#: The published synonym pairs (language perturbation "random_pair"); plurals just add "s".
ROLE_PAIRS = (("a pioneer", "a laggard"), ("a saint", "a sinner"), ("a hero", "a villain"), ("an angel", "a devil"),
              ("an altruist", "an egoist"), ("a sage", "a fool"))

_PREAMBLE = "A very special island is inhabited only by {knight}s and {knave}s. {Knight}s always tell the truth, and {knave}s always lie. "  # noqa: E501
_CLOSING = "So who is {a_knight} and who is {a_knave}?"


def role_words(role_pair: Sequence[str] = KNIGHT_KNAVE) -> dict[str, str]:
    """The published ``knight_knave`` field for a pair like ("a knight", "a knave").

    >>> role_words(("an angel", "a devil"))["Knight"]
    'Angel'
    """
    a_knight, a_knave = role_pair
    knight, knave = a_knight.split()[1], a_knave.split()[1]
    return {"knight": knight, "knave": knave, "a_knight": a_knight, "a_knave": a_knave,
            "Knight": knight.capitalize(), "Knave": knave.capitalize()}


def _assertion(names: Sequence[str], words: dict[str, str], leaf: Statement, negated: bool = False) -> str:
    role = words["a_knight"] if leaf[0] == "telling-truth" else words["a_knave"]
    return f"{names[leaf[1]]} is {'not ' if negated else ''}{role}"


def claim_text(stmt: Statement, names: Sequence[str], words: dict[str, str]) -> str:
    """A depth-2 statement in words, as published ("If ..." keeps its capital mid-sentence).

    >>> claim_text(('->', ('lying', 0), ('telling-truth', 1)), ["Zoey", "Oliver"], role_words())
    'If Zoey is a knave then Oliver is a knight'
    """
    kind = stmt[0]
    if kind == "not":
        return _assertion(names, words, stmt[1], negated=True)
    if kind in ("and", "or"):
        return f" {kind} ".join(_assertion(names, words, arg) for arg in stmt[1:])
    if kind == "->":
        return f"If {_assertion(names, words, stmt[1])} then {_assertion(names, words, stmt[2])}"
    if kind == "<=>":
        return f"{_assertion(names, words, stmt[1])} if and only if {_assertion(names, words, stmt[2])}"
    return _assertion(names, words, stmt)


def list_in_words(items: Sequence[str]) -> str:
    """Published list joining: "A, B, and C" (with the comma even for two: "A, and B").

    >>> list_in_words(["Zoey", "Oliver"])
    'Zoey, and Oliver'
    """
    return ", ".join(items[:-1]) + ", and " + items[-1] if len(items) > 1 else items[0]


def quiz_text(names: Sequence[str], claims: Sequence[str], templates: Sequence[str],
              words: dict[str, str]) -> str:
    """The full puzzle: preamble, the inhabitants, one framed claim per person, the question."""
    said = "".join(" " + template.format(name=name, content=claim)
                   for name, claim, template in zip(names, claims, templates, strict=True))
    meet = f"You meet {len(names)} inhabitants: {list_in_words(names)}."
    return _PREAMBLE.format(**words) + meet + said + " " + _CLOSING.format(**words)


def _roles(names: Sequence[str], solution: Sequence[bool], words: dict[str, str]) -> list[str]:
    return [f"{name} is {words['a_knight'] if knight else words['a_knave']}"
            for name, knight in zip(names, solution, strict=True)]


def solution_text(names: Sequence[str], solution: Sequence[bool], words: dict[str, str]) -> str:
    """The published answer sentence.

    >>> solution_text(["Zoey", "Oliver"], [False, True], role_words())
    'Zoey is a knave, and Oliver is a knight.'
    """
    return list_in_words(_roles(names, solution, words)) + "."


def solution_text_format(names: Sequence[str], solution: Sequence[bool], words: dict[str, str] | None = None) -> str:
    """The published numbered answer, one person per line (knight and knave unless `words` say otherwise).

    >>> print(solution_text_format(["Zoey", "Oliver"], [False, True]))
    (1) Zoey is a knave
    (2) Oliver is a knight
    """
    roles = _roles(names, solution, words or role_words())
    return "\n".join(f"({i}) {role}" for i, role in enumerate(roles, start=1))


COT_HEAD = "Let's think step by step, by considering whether each person is lying and if that leads to contradiction."
COT_FOOT_SOLVED = "This leads to a feasible solution."
COT_FOOT_UNSOLVABLE = "All the configurations lead to contradictions."


def _first_contradicted(roles: list, truths: list[int], knights: tuple[int, ...], all_bits: int) -> int | None:
    """The first guessed person whose claim no completion of the open roles can honour."""
    agreeing = all_bits  # assignments that agree with every role guessed so far
    for person, role in enumerate(roles):
        if role is not None:
            agreeing &= knights[person] if role else all_bits ^ knights[person]
    for person, role in enumerate(roles):
        if role is not None and not (truths[person] if role else all_bits ^ truths[person]) & agreeing:
            return person
    return None


def _search_steps(parsed: Statements, names: Sequence[str], claims: Sequence[str],
                  words: dict[str, str]) -> tuple[list[str], bool]:
    """The search's steps in words, for validated statements, and whether it ended in a solution."""
    n_people = len(parsed)
    knights, all_bits = knight_masks(n_people)
    truths = [statement_mask(stmt, knights, all_bits) for stmt in parsed]
    mentioned = [mentioned_people(stmt) for stmt in parsed]
    order = list(range(n_people))
    roles: list[bool | None] = [None] * n_people
    tried = [0] * n_people  # roles tried so far per person: 1 = knight, 2 = knight and knave
    steps: list[str] = []
    cursor = 0
    while cursor < n_people:
        if tried[order[cursor]] == 2:
            exhausted = []  # innermost first
            while cursor >= 0 and tried[order[cursor]] == 2:
                tried[order[cursor]], roles[order[cursor]] = 0, None
                exhausted.append(names[order[cursor]])
                cursor -= 1
            if cursor < 0:
                return steps, False
            listed = " and ".join(exhausted) if len(exhausted) == 2 else list_in_words(exhausted)
            steps.append(f"We have exhausted all possibilities for {listed}, "
                         f"so let us go back and reconsider {names[order[cursor]]}.")
        person = order[cursor]
        roles[person] = tried[person] == 0  # knight first, as published
        tried[person] += 1
        contradicted = _first_contradicted(roles, truths, knights, all_bits)
        steps.append(_guess_text(person, roles, contradicted, names, claims, words))
        if contradicted is None:
            cursor += 1
            # the people just talked about first; as published, this order is never restored on backtracking
            remaining = order[cursor:]
            front = [other for other in mentioned[person] if other in remaining]
            order[cursor:] = front + [other for other in remaining if other not in front]
    return steps, True


def _guess_text(person: int, roles: Sequence[bool | None], contradicted: int | None, names: Sequence[str],
                claims: Sequence[str], words: dict[str, str]) -> str:
    """`person` tried in their role: no contradiction (`contradicted` None), or the claim it breaks."""
    role = words["a_knight"] if roles[person] else words["a_knave"]
    if contradicted is None:
        false = "" if roles[person] else "false "
        return (f"Assume {names[person]} is {role}. No contradiction is found in their {false}claim that "
                f"{claims[person]}.")
    false = "" if roles[contradicted] else "false "
    whose = "their own" if contradicted == person else names[contradicted]
    return (f"{names[person]} cannot be {role}, because this would contradict the {false}claim of {whose} "
            f"that {claims[contradicted]}.")


def chain_of_thought(statements: StatementsLike, names: Sequence[str],
                     knight_knave: dict[str, str] | None = None) -> tuple[str, list[str], str]:
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
    steps, solved = _search_steps(parsed, names, claims, words)
    return COT_HEAD, steps, COT_FOOT_SOLVED if solved else COT_FOOT_UNSOLVABLE


def render_record(statements, solution: tuple[bool, ...], index: int, rng: random.Random,
                  role_pair: RolePair = None) -> dict:
    """Word one puzzle and its solution as a published K&K record (names and templates from ``rng``)."""
    n_people = len(statements)
    names = rng.sample(COMMON_NAMES, n_people)
    pair = rng.choice(ROLE_PAIRS) if role_pair == "random" else (role_pair or KNIGHT_KNAVE)
    words = role_words(pair)
    templates = [rng.choice(SPEECH_TEMPLATES) for _ in range(n_people)]
    claims = [claim_text(stmt, names, words) for stmt in statements]
    _, steps, foot = chain_of_thought(statements, names, words)
    return {
        "quiz": quiz_text(names, claims, templates, words),
        "names": names,
        "knight_knave": words,
        "solution": list(solution),
        "solution_text": solution_text(names, solution, words),
        "solution_text_format": solution_text_format(names, solution, words),
        "cot_head": COT_HEAD,
        "cot_repeat_steps": steps,
        "cot_foot": foot,
        "statements": str(statements),
        "index": index,
    }
