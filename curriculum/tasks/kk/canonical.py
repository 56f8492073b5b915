"""Canonical keys: one string per puzzle up to renaming and reordering the people.

Two puzzles get the same key exactly when a permutation of the people (and swapping operands of
the commutative ``and``/``or``/``<=>``) turns one's statements into the other's. The key is the
statement tuple relabelled into a canonical order, found by colour refinement plus
individualisation (the method of graph canonisers such as nauty, in miniature): people are
coloured by what they say and what is said about them until the colours stop splitting; if some
people still share a colour, each is tried as "first" in turn and the smallest result wins. Only
puzzles with symmetric people branch, and people that can simply be swapped are tried once, so
the search stays small in practice (its worst case, rich symmetry among many people, is n!).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from curriculum.tasks.kk.grammar import (
    COMMUTATIVE,
    LEAF_KINDS,
    Statement,
    Statements,
    StatementsLike,
    mentioned_people,
    parse_statements,
)

_SPEAKER, _TARGET = -1, -2  # stand-ins for "the speaker" / "the person described" in a view


def _view(stmt: Statement, colors: Sequence[int], speaker: int, target: int = _TARGET) -> tuple:
    """``stmt`` with people replaced by their colour (or the speaker/target marks), operands sorted."""
    if stmt[0] in LEAF_KINDS:
        person = stmt[1]
        mark = _SPEAKER if person == speaker else _TARGET if person == target else colors[person]
        return (stmt[0], mark)
    operands = [_view(arg, colors, speaker, target) for arg in stmt[1:]]
    if stmt[0] in COMMUTATIVE:
        operands.sort()
    return (stmt[0], *operands)


def _ranks(signatures: list) -> list[int]:
    order = sorted(set(signatures))
    rank = {signature: i for i, signature in enumerate(order)}
    return [rank[signature] for signature in signatures]


def _refine(parsed: Statements, mentions: list[set[int]], colors: list[int]) -> list[int]:
    """Split colour classes by what each person says and what is said about them, until stable."""
    n_people = len(parsed)
    while True:
        signatures = []
        for person in range(n_people):
            said_about = sorted(
                (colors[speaker], _view(parsed[speaker], colors, speaker, person))
                for speaker in range(n_people)
                if speaker != person and person in mentions[speaker]
            )
            signatures.append((colors[person], _view(parsed[person], colors, person), tuple(said_about)))
        refined = _ranks(signatures)
        if len(set(refined)) == len(set(colors)):
            return refined
        colors = refined


def _relabelled(parsed: Statements, labels: Sequence[int]) -> Statements:
    def relabel(stmt: Statement) -> Statement:
        if stmt[0] in LEAF_KINDS:
            return (stmt[0], labels[stmt[1]])
        operands = [relabel(arg) for arg in stmt[1:]]
        if stmt[0] in COMMUTATIVE:
            operands.sort(key=repr)
        return (stmt[0], *operands)

    by_label = sorted(range(len(parsed)), key=labels.__getitem__)
    return tuple(relabel(parsed[person]) for person in by_label)


def _swap_is_symmetry(parsed: Statements, plain: Statements, a: int, b: int) -> bool:
    """Whether exchanging people ``a`` and ``b`` leaves the puzzle as it is (``plain``: unswapped)."""
    labels = list(range(len(parsed)))
    labels[a], labels[b] = b, a
    return _relabelled(parsed, labels) == plain


def _smallest_form(parsed: Statements, mentions: list[set[int]], plain: Statements, colors: list[int]) -> str:
    colors = _refine(parsed, mentions, colors)
    tied = [color for color in set(colors) if colors.count(color) > 1]
    if not tied:
        return repr(_relabelled(parsed, colors))
    cell = min(tied)
    forms: list[str] = []
    explored: list[int] = []
    for person in (p for p, color in enumerate(colors) if color == cell):
        # Exchangeable twins lead to the same smallest form; exploring one of them is enough
        # (this keeps "everyone says the same about themselves" linear instead of n!).
        if any(_swap_is_symmetry(parsed, plain, person, twin) for twin in explored):
            continue
        explored.append(person)
        # Put `person` just before the rest of its class; every choice is explored, so the
        # minimum does not depend on how the people were numbered.
        individualised = [2 * color for color in colors]
        individualised[person] -= 1
        forms.append(_smallest_form(parsed, mentions, plain, individualised))
    return min(forms)


def canonical_key(puzzle: Mapping | StatementsLike) -> str:
    """A key shared by exactly the puzzles equal up to renaming/reordering people.

    Takes a record (its ``statements`` field), the statements string or the parsed tuples. The
    key is itself a valid statements string: the puzzle with its people in canonical order.

    >>> a = canonical_key("(('lying', 1), ('and', ('telling-truth', 0), ('telling-truth', 1)))")
    >>> b = canonical_key("(('and', ('telling-truth', 1), ('telling-truth', 0)), ('lying', 0))")
    >>> a == b, a == canonical_key("(('lying', 1), ('or', ('telling-truth', 0), ('telling-truth', 1)))")
    (True, False)
    """
    statements = puzzle["statements"] if isinstance(puzzle, Mapping) else puzzle
    parsed = parse_statements(statements)
    mentions = [set(mentioned_people(stmt)) for stmt in parsed]
    plain = _relabelled(parsed, range(len(parsed)))
    return _smallest_form(parsed, mentions, plain, [0] * len(parsed))

