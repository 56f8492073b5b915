"""curriculum.tasks.kk.canonical_key: equal exactly for puzzles equal up to renaming/reordering people."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from curriculum.tasks.kk import canonical_key, generate, parse_statements, solve
from curriculum.tasks.kk.statements import COMMUTATIVE, LEAF_KINDS, OPERATORS


def relabel(statements, new_label, rng=None):
    """Person i becomes new_label[i] and speaks in that position; commutative operands shuffled."""

    def rename(stmt):
        if stmt[0] in LEAF_KINDS:
            return (stmt[0], new_label[stmt[1]])
        operands = [rename(arg) for arg in stmt[1:]]
        if rng is not None and stmt[0] in COMMUTATIVE:
            rng.shuffle(operands)
        return (stmt[0], *operands)

    moved = [None] * len(statements)
    for person, stmt in enumerate(statements):
        moved[new_label[person]] = rename(stmt)
    return tuple(moved)


def brute_force_class(statements) -> str:
    """Slow and obviously right: the smallest normal form over every permutation of the people."""

    def normal(stmt):
        if stmt[0] in LEAF_KINDS:
            return stmt
        operands = [normal(arg) for arg in stmt[1:]]
        return (stmt[0], *(sorted(operands, key=repr) if stmt[0] in COMMUTATIVE else operands))

    n_people = len(statements)
    orderings = itertools.permutations(range(n_people))
    return min(repr(tuple(normal(s) for s in relabel(statements, perm))) for perm in orderings)


@st.composite
def puzzles_and_relabellings(draw):
    """A random depth-2 puzzle (symmetric ones included: few people, few leaf kinds) and a relabelling."""
    n_people = draw(st.integers(2, 6))
    leaf = st.tuples(st.sampled_from(LEAF_KINDS), st.integers(0, n_people - 1))
    statement = st.one_of(
        leaf,
        st.tuples(st.just("not"), leaf),
        st.builds(lambda op, a, b: (op, a, b), st.sampled_from(OPERATORS[1:]), leaf, leaf),
    )
    statements = tuple(draw(st.lists(statement, min_size=n_people, max_size=n_people)))
    return statements, draw(st.permutations(range(n_people))), draw(st.integers(0, 2**32))


@settings(max_examples=100, deadline=None)
@given(puzzles_and_relabellings())
def test_key_ignores_how_people_are_numbered_and_operand_order(case):
    statements, new_label, seed = case
    moved = relabel(statements, new_label, random.Random(seed))
    assert canonical_key(moved) == canonical_key(statements)


def test_key_matches_brute_force_classes_exactly():
    """Same key if and only if the same brute-force class, on generated and on symmetric puzzles."""
    rng = random.Random(0)
    sizes = ((2, 150), (3, 300), (4, 150))
    puzzles = [parse_statements(r["statements"]) for ppl, n in sizes for r in generate(ppl, n, seed=1)]
    symmetric = [tuple(("telling-truth", (i + 1) % n) for i in range(n)) for n in (3, 4)]
    symmetric += [tuple(("<=>", ("telling-truth", i), ("lying", i ^ 1)) for i in range(4))]
    puzzles += symmetric + [relabel(p, rng.sample(range(len(p)), len(p)), rng) for p in puzzles[::7]]
    keys = [canonical_key(p) for p in puzzles]
    classes = [brute_force_class(p) for p in puzzles]
    key_of_class, class_of_key = {}, {}
    for key, cls in zip(keys, classes, strict=True):
        assert key_of_class.setdefault(cls, key) == key, "one puzzle class got two keys"
        assert class_of_key.setdefault(key, cls) == cls, "two different puzzles share a key"
    assert len(set(keys)) > 400


def test_key_is_an_equivalent_puzzle_and_accepts_records():
    record = generate(4, 1, seed=2)[0]
    key = canonical_key(record)
    assert key == canonical_key(record["statements"]) == canonical_key(parse_statements(record["statements"]))
    # The key is the same puzzle with people reordered: same number of solutions, same role counts.
    (original,) = solve(record["statements"])
    (reordered,) = solve(key)
    assert sorted(original) == sorted(reordered)


def test_keys_at_eight_people_and_on_symmetric_puzzles():
    # How fast these are (500 keys, the 14! and six-pair puzzles) is a `make bench` figure.
    keys = {canonical_key(r) for r in generate(8, 500, seed=0)}
    assert len(keys) == 500  # random 8-person puzzles essentially never coincide
    everyone_honest = tuple(("telling-truth", i) for i in range(14))  # 14! orderings if searched naively
    pairs = tuple(("telling-truth", i ^ 1) for i in range(12))  # six interchangeable pairs
    for puzzle in (everyone_honest, pairs):
        rotated = relabel(puzzle, [(i + 1) % len(puzzle) for i in range(len(puzzle))])  # each person one seat on
        assert canonical_key(puzzle) == canonical_key(rotated)
