"""Truth-table solver on bitmasks: every assignment of n people is one bit of a Python int.

Assignment number ``a`` (0 <= a < 2**n) makes person ``i`` a knight exactly when bit ``n-1-i``
of ``a`` is 0. Counting ``a`` upwards therefore walks the assignments in the order of
``itertools.product((True, False), repeat=n)``: all knights first, person 0 changing slowest,
the order the published ``find_solution`` uses. A statement evaluates to one int whose bit ``a``
says whether it is true under assignment ``a``; ``and``/``or``/``not`` become ``&``/``|``/``^``,
so a puzzle is solved with a handful of big-int operations instead of a loop over assignments.
"""

from __future__ import annotations

from functools import lru_cache

from curriculum.tasks.kk.grammar import Statement, Statements, StatementsLike, parse_statements

#: 2**20 assignments make million-bit masks; beyond that a truth table is the wrong tool.
MAX_PEOPLE = 20

Assignment = tuple[bool, ...]


@lru_cache(maxsize=64)
def knight_masks(n_people: int) -> tuple[int, ...]:
    """Per person, the mask of the assignments in which that person is a knight.

    >>> [bin(mask) for mask in knight_masks(2)]  # assignments 0..3: TT, TF, FT, FF
    ['0b11', '0b101']
    """
    if not 1 <= n_people <= MAX_PEOPLE:
        raise ValueError(f"the solver handles 1..{MAX_PEOPLE} people, got {n_people}")
    n_assignments = 1 << n_people
    all_bits = (1 << n_assignments) - 1
    masks = []
    for person in range(n_people):
        bit = n_people - 1 - person
        period = 1 << (bit + 1)
        low_half = (1 << (1 << bit)) - 1  # within one period, bit `bit` of `a` is 0 in the low half
        repeat = all_bits // ((1 << period) - 1)  # a 1 at the start of every period
        masks.append(low_half * repeat)
    return tuple(masks)


def all_assignments_mask(n_people: int) -> int:
    """The mask with one bit set per assignment of ``n_people`` people."""
    return (1 << (1 << n_people)) - 1


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
        result = all_bits
        for mask in operands:
            result &= mask
        return result
    if kind == "or":
        result = 0
        for mask in operands:
            result |= mask
        return result
    if kind == "->":
        return (all_bits ^ operands[0]) | operands[1]
    if kind == "<=>":
        return all_bits ^ (operands[0] ^ operands[1])
    raise ValueError(f"unknown node type {kind!r}")


def consistent_mask(parsed: Statements) -> int:
    """The assignments in which every person is a knight exactly when their statement is true.

    ``parsed`` must already be validated (:func:`~curriculum.tasks.kk.grammar.parse_statements`).
    """
    n_people = len(parsed)
    knights = knight_masks(n_people)
    all_bits = all_assignments_mask(n_people)
    consistent = all_bits
    for person, stmt in enumerate(parsed):
        # ^ marks the assignments where role and truth differ; those are the inconsistent ones.
        consistent &= all_bits ^ (knights[person] ^ statement_mask(stmt, knights, all_bits))
    return consistent


def assignments_in(mask: int, n_people: int) -> list[Assignment]:
    """Decode the set bits of ``mask`` into assignments, in ascending assignment order.

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

    Accepts the published string form or the parsed tuples; a unique puzzle gives one assignment.

    >>> solve("(('lying', 1), ('and', ('telling-truth', 0), ('telling-truth', 1)))")
    [(True, False)]
    >>> solve((('telling-truth', 0), ('telling-truth', 1)))  # nobody commits to anything
    [(True, True), (True, False), (False, True), (False, False)]
    """
    parsed = parse_statements(statements)
    return assignments_in(consistent_mask(parsed), len(parsed))
