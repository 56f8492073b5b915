"""English rendering in the published K&K style: names, speech templates, claims, solutions.

The strings follow the published generator word for word, so generated quizzes read like the
K&K data a model is evaluated on (tests check them against every record in the shared data).
"""

from __future__ import annotations

from collections.abc import Sequence

from curriculum.tasks.kk.grammar import Statement

#: The 51 common first names the published puzzles draw from (without replacement).
COMMON_NAMES = (
    "Emma", "Liam", "Olivia", "Noah", "Ava", "Ethan", "Sophia", "Mason", "Isabella", "William",
    "Mia", "James", "Charlotte", "Benjamin", "Amelia", "Lucas", "Harper", "Henry", "Evelyn",
    "Alexander", "Abigail", "Michael", "Emily", "Daniel", "Elizabeth", "Jacob", "Sofia", "Logan",
    "Avery", "Jackson", "Ella", "Sebastian", "Scarlett", "Jack", "Grace", "Aiden", "Chloe", "Owen",
    "Victoria", "Samuel", "Riley", "Matthew", "Aria", "Joseph", "Lily", "Luke", "Aurora", "David",
    "Zoey", "Oliver", "Penelope",
)

#: One of these frames each person's statement; ``{content}`` is the claim, ``{name}`` the speaker.
SPEECH_TEMPLATES = (
    "{name} said that {content}.",
    "{name} told you that {content}.",
    '{name} said, "{content}."',
    '{name} stated, "{content}".',
    'According to {name}, "{content}".',
    "In {name}'s words: \"{content}\".",
    '{name} remarked, "{content}".',
    '"{content}," {name} declared.',
    '{name} was heard saying, "{content}".',
    "{name} expressed that {content}.",
    '"{content}" - {name}.',
    'As {name} put it, "{content}".',
    '{name} asserted: "{content}".',
    '"{content}," {name} mentioned.',
    '{name} commented, "{content}".',
    'In a statement by {name}: "{content}".',
    '{name} noted, "{content}".',
    '"{content}," {name} claimed.',
)

KNIGHT_KNAVE = ("a knight", "a knave")
#: The published synonym pairs (language perturbation "random_pair"); plurals just add "s".
ROLE_PAIRS = (
    ("a pioneer", "a laggard"),
    ("a saint", "a sinner"),
    ("a hero", "a villain"),
    ("an angel", "a devil"),
    ("an altruist", "an egoist"),
    ("a sage", "a fool"),
)

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
    said = "".join(
        " " + template.format(name=name, content=claim)
        for name, claim, template in zip(names, claims, templates, strict=True)
    )
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


def solution_text_format(names: Sequence[str], solution: Sequence[bool], words: dict[str, str]) -> str:
    """The published numbered answer, one person per line.

    >>> print(solution_text_format(["Zoey", "Oliver"], [False, True], role_words()))
    (1) Zoey is a knave
    (2) Oliver is a knight
    """
    return "\n".join(f"({i}) {role}" for i, role in enumerate(_roles(names, solution, words), start=1))
