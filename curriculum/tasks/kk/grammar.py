"""The published K&K statement grammar: tuple trees, parsing their string form, validation.

A puzzle is a tuple with one statement per person; person ``i`` speaks ``statements[i]``.
A statement is one of

- ``('telling-truth', i)``: "person i is a knight";  ``('lying', i)``: "person i is a knave"
- ``('not', s)``
- ``('and', s1, s2, ...)`` and ``('or', s1, s2, ...)`` with two or more operands
- ``('->', s1, s2)`` and ``('<=>', s1, s2)``

Records store the tree as ``str(statements)``; :func:`parse_statements` reads that form back.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from functools import lru_cache

from core.checks import is_int

Statement = tuple
Statements = tuple[Statement, ...]
StatementsLike = str | Sequence

LEAF_KINDS = ("telling-truth", "lying")
OPERATORS = ("not", "and", "or", "->", "<=>")
#: Commutative operators: operand order does not change the meaning (used by canonical keys).
COMMUTATIVE = ("and", "or", "<=>")


class StatementError(ValueError):
    """A statement tree that does not follow the grammar; the message says where and why."""


def parse_statements(statements: StatementsLike) -> Statements:
    """Parse and validate a puzzle's statements: the published string form, or tuples/lists.

    Lists (as JSON gives them) become tuples, so the result compares equal to the published tree.

    >>> parse_statements("(('lying', 1), ('and', ('telling-truth', 0), ('telling-truth', 1)))")
    (('lying', 1), ('and', ('telling-truth', 0), ('telling-truth', 1)))
    >>> parse_statements("(('lying', 2),)")
    Traceback (most recent call last):
    ...
    curriculum.tasks.kk.grammar.StatementError: statement 0: person 2 out of range for 1 people in ('lying', 2)
    """
    if isinstance(statements, str):
        return _parse_text(statements)
    if isinstance(statements, bytes) or not isinstance(statements, Sequence) or not statements:
        raise StatementError(f"expected a non-empty sequence of statements, got {statements!r:.200}")
    n_people = len(statements)
    return tuple(_validated(stmt, n_people, f"statement {i}") for i, stmt in enumerate(statements))


@lru_cache(maxsize=16_384)
def _parse_text(text: str) -> Statements:
    # Cached: a record's statements are typically parsed to load, solve and key it. Tuples are
    # immutable, so sharing the parsed tree is safe; errors are raised again, not cached.
    try:
        statements = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise StatementError(f"not a Python literal of statement tuples: {text[:200]!r}") from exc
    if isinstance(statements, str):
        raise StatementError(f"expected a non-empty sequence of statements, got {statements!r:.200}")
    return parse_statements(statements)


def _validated(stmt, n_people: int, where: str) -> Statement:
    """Return ``stmt`` as nested tuples, or raise StatementError naming ``where`` and the problem."""
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


def top_label(stmt: Statement) -> str:
    """The statement's top node as counted in the operator mix: an operator, or "leaf".

    >>> top_label(('->', ('lying', 0), ('telling-truth', 1))), top_label(('lying', 0))
    ('->', 'leaf')
    """
    return "leaf" if stmt[0] in LEAF_KINDS else stmt[0]


def mentioned_people(stmt: Statement) -> list[int]:
    """Persons named in ``stmt``, left to right, each once (in the order of first mention).

    >>> mentioned_people(('or', ('lying', 2), ('not', ('telling-truth', 0)), ('telling-truth', 2)))
    [2, 0]
    """
    found: list[int] = []
    stack = [stmt]
    while stack:
        node = stack.pop()
        if node[0] in LEAF_KINDS:
            if node[1] not in found:
                found.append(node[1])
        else:
            stack.extend(reversed(node[1:]))
    return found

