"""A puzzle's statements: the published grammar, a truth-table solver on bitmasks, the canonical key.

Person ``i`` speaks ``statements[i]``: ``('telling-truth', i)`` ("person i is a knight"), ``('lying', i)``,
``('not', s)``, ``('and', s1, s2, ...)``, ``('or', ...)``, ``('->', s1, s2)``, ``('<=>', s1, s2)``; records store
``str(statements)``. Assignment ``a`` (an int) makes person ``i`` a knight when bit ``n-1-i`` of ``a`` is 0, so
counting ``a`` up walks the published ``itertools.product((True, False), repeat=n)``; a statement is the int of
the assignments that make it true.
"""

from __future__ import annotations

import ast
import functools
import operator
from collections.abc import Mapping, Sequence

from core.checks import is_int

Statement = tuple
Statements = tuple[Statement, ...]
StatementsLike = str | Sequence
Assignment = tuple[bool, ...]

LEAF_KINDS = ("telling-truth", "lying")
OPERATORS = ("not", "and", "or", "->", "<=>")
COMMUTATIVE = ("and", "or", "<=>")  # operand order does not change their meaning (canonical keys sort them)
MAX_PEOPLE = 20  # 2**20 assignments make million-bit masks; beyond that a truth table is the wrong tool


class StatementError(ValueError):
    """A statement tree that does not follow the grammar; the message says where and why."""


def parse_statements(statements: StatementsLike) -> Statements:
    """Parse and validate a puzzle's statements: the published string form, or tuples/lists (made tuples).

    >>> parse_statements("(('lying', 1), ('and', ('telling-truth', 0), ('telling-truth', 1)))")
    (('lying', 1), ('and', ('telling-truth', 0), ('telling-truth', 1)))
    >>> parse_statements("(('lying', 2),)")
    Traceback (most recent call last):
    ...
    curriculum.tasks.kk.statements.StatementError: statement 0: person 2 out of range for 1 people in ('lying', 2)
    """
    if isinstance(statements, str):
        return _parse_text(statements)
    if isinstance(statements, bytes) or not isinstance(statements, Sequence) or not statements:
        raise StatementError(f"expected a non-empty sequence of statements, got {statements!r:.200}")
    n_people = len(statements)
    return tuple(_validated(stmt, n_people, f"statement {i}") for i, stmt in enumerate(statements))


@functools.lru_cache(maxsize=16_384)
def _parse_text(text: str) -> Statements:
    # cached: a record's statements are parsed to load, solve and key it; errors are raised again, not cached
    try:
        statements = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise StatementError(f"not a Python literal of statement tuples: {text[:200]!r}") from exc
    if isinstance(statements, str):
        raise StatementError(f"expected a non-empty sequence of statements, got {statements!r:.200}")
    return parse_statements(statements)


def _validated(stmt, n_people: int, where: str) -> Statement:
    if isinstance(stmt, (str, bytes)) or not isinstance(stmt, Sequence) or not stmt:
        raise StatementError(f"{where}: expected a tuple like ('lying', 0), got {stmt!r:.200}")
    kind, args = stmt[0], stmt[1:]
    if kind in LEAF_KINDS:
        person = args[0] if len(args) == 1 else None
        if not is_int(person):  # True/False as a person index is a data error, not person 1/0
            raise StatementError(f"{where}: {kind!r} takes one person index, got {tuple(stmt)!r:.200}")
        if not 0 <= person < n_people:
            raise StatementError(f"{where}: person {person} out of range for {n_people} people in {stmt!r}")
        return (kind, person)
    expected = {"not": (1, 1), "->": (2, 2), "<=>": (2, 2), "and": (2, None), "or": (2, None)}.get(kind)
    if expected is None:
        raise StatementError(f"{where}: unknown node type {kind!r}; expected one of {LEAF_KINDS + OPERATORS}")
    low, high = expected
    if len(args) < low or (high is not None and len(args) > high):
        count = f"exactly {low}" if low == high else f"at least {low}"
        raise StatementError(f"{where}: {kind!r} takes {count} operands, got {len(args)}")
    return (kind,) + tuple(_validated(arg, n_people, where) for arg in args)


def mentioned_people(stmt: Statement) -> list[int]:
    """Persons named in ``stmt``, each once, in the order of first mention.

    >>> mentioned_people(('or', ('lying', 2), ('not', ('telling-truth', 0)), ('telling-truth', 2)))
    [2, 0]
    """
    if stmt[0] in LEAF_KINDS:
        return [stmt[1]]
    return list(dict.fromkeys(person for arg in stmt[1:] for person in mentioned_people(arg)))


@functools.lru_cache(maxsize=64)
def knight_masks(n_people: int) -> tuple[tuple[int, ...], int]:
    """Per person, the mask of the assignments in which that person is a knight; and the mask of them all.

    >>> masks, all_bits = knight_masks(2)  # assignments 0..3: TT, TF, FT, FF
    >>> [bin(mask) for mask in masks], bin(all_bits)
    (['0b11', '0b101'], '0b1111')
    """
    if not 1 <= n_people <= MAX_PEOPLE:
        raise ValueError(f"the solver handles 1..{MAX_PEOPLE} people, got {n_people}")
    all_bits = (1 << (1 << n_people)) - 1
    masks = []
    for person in range(n_people):
        bit = n_people - 1 - person
        low_half = (1 << (1 << bit)) - 1  # within one period, bit `bit` of `a` is 0 in the low half
        repeat = all_bits // ((1 << (1 << (bit + 1))) - 1)  # a 1 at the start of every period
        masks.append(low_half * repeat)
    return tuple(masks), all_bits


def statement_mask(stmt: Statement, knights: tuple[int, ...], all_bits: int) -> int:
    """The assignments (as a mask) under which the validated statement ``stmt`` is true."""
    kind = stmt[0]
    if kind == "telling-truth":
        return knights[stmt[1]]
    if kind == "lying":
        return all_bits ^ knights[stmt[1]]
    operands = [statement_mask(arg, knights, all_bits) for arg in stmt[1:]]
    if kind == "not":
        return all_bits ^ operands[0]
    if kind == "and":
        return functools.reduce(operator.and_, operands, all_bits)
    if kind == "or":
        return functools.reduce(operator.or_, operands, 0)
    if kind == "->":
        return (all_bits ^ operands[0]) | operands[1]
    if kind == "<=>":
        return all_bits ^ (operands[0] ^ operands[1])
    raise ValueError(f"unknown node type {kind!r}")


def assignments_in(mask: int, n_people: int) -> list[Assignment]:
    """The set bits of ``mask`` as assignments, in ascending assignment order.

    >>> assignments_in(0b0110, 2)
    [(True, False), (False, True)]
    """
    found = []
    while mask:
        lowest = mask & -mask
        number = lowest.bit_length() - 1
        found.append(tuple(not (number >> (n_people - 1 - person)) & 1 for person in range(n_people)))
        mask ^= lowest
    return found


def solve(statements: StatementsLike) -> list[Assignment]:
    """Every consistent assignment (True = knight), in ``itertools.product((True, False))`` order.

    >>> solve("(('lying', 1), ('and', ('telling-truth', 0), ('telling-truth', 1)))")
    [(True, False)]
    >>> solve((('telling-truth', 0), ('telling-truth', 1)))  # nobody commits to anything
    [(True, True), (True, False), (False, True), (False, False)]
    """
    parsed = parse_statements(statements)
    knights, all_bits = knight_masks(len(parsed))
    consistent = all_bits
    for person, stmt in enumerate(parsed):
        # ^ marks the assignments where role and truth differ: the inconsistent ones
        consistent &= all_bits ^ (knights[person] ^ statement_mask(stmt, knights, all_bits))
    return assignments_in(consistent, len(parsed))


# Canonical keys: people are coloured by what they say and what is said about them until the colours stop
# splitting (colour refinement); people still sharing a colour are each tried as "first" and the smallest
# form wins (individualisation, as graph canonisers such as nauty do). Exchangeable people are tried once,
# so only rich symmetry among many people costs much (its worst case is n!).
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


def _refine(parsed: Statements, mentions: list[set[int]], colors: list[int]) -> list[int]:
    """Split colour classes by what each person says and what is said about them, until stable."""
    n_people = len(parsed)
    while True:
        signatures = []
        for person in range(n_people):
            said_about = sorted((colors[speaker], _view(parsed[speaker], colors, speaker, person))
                                for speaker in range(n_people) if speaker != person and person in mentions[speaker])
            signatures.append((colors[person], _view(parsed[person], colors, person), tuple(said_about)))
        rank = {signature: i for i, signature in enumerate(sorted(set(signatures)))}
        refined = [rank[signature] for signature in signatures]
        if len(rank) == len(set(colors)):
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


def _smallest_form(parsed: Statements, mentions: list[set[int]], plain: Statements, colors: list[int]) -> str:
    colors = _refine(parsed, mentions, colors)
    tied = [color for color in set(colors) if colors.count(color) > 1]
    if not tied:
        return repr(_relabelled(parsed, colors))
    cell = min(tied)
    forms: list[str] = []
    explored: list[int] = []
    for person in (p for p, color in enumerate(colors) if color == cell):
        # a twin whose exchange with an explored person leaves the puzzle as it is (`plain`) leads to the
        # same smallest form: this keeps "everyone says the same about themselves" linear instead of n!
        swaps = [list(range(len(parsed))) for _ in explored]
        for labels, twin in zip(swaps, explored, strict=True):
            labels[person], labels[twin] = twin, person
        if any(_relabelled(parsed, labels) == plain for labels in swaps):
            continue
        explored.append(person)
        # `person` just before the rest of its class; every choice is explored, so the minimum does not
        # depend on how the people were numbered
        individualised = [2 * color for color in colors]
        individualised[person] -= 1
        forms.append(_smallest_form(parsed, mentions, plain, individualised))
    return min(forms)


def canonical_key(puzzle: Mapping | StatementsLike) -> str:
    """The puzzle with its people in canonical order: one key for exactly the puzzles equal up to renaming.

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
