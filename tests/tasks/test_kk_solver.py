"""curriculum.tasks.kk.statements (grammar and solver): the published records, a brute-force reference, bad input."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curriculum.tasks.kk import StatementError, parse_statements, solve
from curriculum.tasks.kk.statements import LEAF_KINDS

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared/data/kk-logic-rl"


@pytest.fixture(scope="module")
def published_records() -> list[dict]:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared K&K records not found at {SHARED_DATA}")
    import pyarrow.parquet as pq

    files = sorted(SHARED_DATA.glob("*ppl/*.parquet"))
    columns = ["statements", "solution"]
    return [row for path in files for row in pq.read_table(path, columns=columns).to_pylist()]


def reference_truth(stmt, knights: tuple[bool, ...]) -> bool:
    """Plain recursive evaluation, written independently of the bitmask solver."""
    kind, args = stmt[0], stmt[1:]
    if kind == "telling-truth":
        return knights[args[0]]
    if kind == "lying":
        return not knights[args[0]]
    values = [reference_truth(arg, knights) for arg in args]
    return {
        "not": lambda: not values[0],
        "and": lambda: all(values),
        "or": lambda: any(values),
        "->": lambda: (not values[0]) or values[1],
        "<=>": lambda: values[0] == values[1],
    }[kind]()


def reference_solve(statements) -> list[tuple[bool, ...]]:
    return [
        knights
        for knights in itertools.product((True, False), repeat=len(statements))
        if all(reference_truth(stmt, knights) == knights[i] for i, stmt in enumerate(statements))
    ]


def _nary(operator: str, operands: list) -> tuple:
    return (operator, *operands)


@st.composite
def puzzles(draw, max_people: int = 6):
    """Random statement trees of any depth and width over 1..max_people people."""
    n_people = draw(st.integers(1, max_people))
    leaf = st.tuples(st.sampled_from(LEAF_KINDS), st.integers(0, n_people - 1))
    statement = st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.tuples(st.just("not"), inner),
            st.builds(_nary, st.sampled_from(["and", "or"]), st.lists(inner, min_size=2, max_size=3)),
            st.tuples(st.sampled_from(["->", "<=>"]), inner, inner),
        ),
        max_leaves=5,
    )
    return tuple(draw(st.lists(statement, min_size=n_people, max_size=n_people)))


def test_solver_agrees_with_every_published_record(published_records):
    assert len(published_records) == 5000
    wrong = [r for r in published_records if solve(r["statements"]) != [tuple(r["solution"])]]
    assert wrong == [], f"{len(wrong)} records disagree, first: {wrong[0]}"


def test_published_statement_strings_round_trip(published_records):
    for record in published_records:
        assert str(parse_statements(record["statements"])) == record["statements"]


@settings(max_examples=100, deadline=None)
@given(puzzles())
def test_bitmask_solver_matches_brute_force(statements):
    assert solve(statements) == reference_solve(statements)
    assert solve(str(statements)) == reference_solve(statements)


def test_solutions_come_in_product_order_knights_first():
    # Person 0 says "I am a knight" (either role fits); person 1 vouches for 0, so 1 shares 0's role.
    statements = (("telling-truth", 0), ("telling-truth", 0))
    assert solve(statements) == [(True, True), (False, False)]
    assert solve((("telling-truth", 0), ("telling-truth", 1), ("telling-truth", 2))) == list(
        itertools.product((True, False), repeat=3)
    )


def test_json_lists_are_accepted_as_statements():
    assert solve([["lying", 1], ["and", ["telling-truth", 0], ["telling-truth", 1]]]) == [(True, False)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("(('lying', 1),", "not a Python literal"),
        ("()", "non-empty sequence"),
        ("'lying'", "non-empty sequence"),
        ("(('lying', 3), ('lying', 0))", "statement 0: person 3 out of range for 2 people"),
        ("(('lying', 0), ('maybe', 0))", "statement 1: unknown node type 'maybe'"),
        ("(('and', ('lying', 0)),)", "'and' takes at least 2 operands, got 1"),
        ("(('->', ('lying', 0), ('lying', 0), ('lying', 0)),)", "'->' takes exactly 2 operands, got 3"),
        ("(('not', ('lying', 0), ('lying', 0)),)", "'not' takes exactly 1 operands"),
        ("(('telling-truth', True),)", "takes one person index"),
        ("(('telling-truth', 0, 1),)", "takes one person index"),
        ("((),)", "expected a tuple like ('lying', 0)"),
    ],
)
def test_bad_statements_fail_with_a_clear_message(text, message):
    with pytest.raises(StatementError, match=re.escape(message)):
        solve(text)


def test_too_many_people_for_a_truth_table():
    with pytest.raises(ValueError, match="1..20 people"):
        solve(tuple(("telling-truth", i) for i in range(21)))
