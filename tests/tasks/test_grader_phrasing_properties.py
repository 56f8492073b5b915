"""Property tests of the phrasing classes of tests/tasks/test_grader_phrasings.py: each rendering of a random puzzle
(2-8 people, K&K names) grades right, one flipped role grades wrong, and no variation of a wrong or hedged
answer passes. The real K&K records check the same renderings, and that a copied question never passes."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from curriculum.tasks.kk import COMMON_NAMES
from curriculum.tasks.kk.grading.grader import grade
from tests.conftest import SHARED_DATA


def T(answer: str) -> str:
    return f"<think>Check each statement in turn.</think>\n<answer>\n{answer}\n</answer>"


def role(knight: bool) -> str:
    return "a knight" if knight else "a knave"


def listing(items: list[str], oxford: bool) -> str:
    """'A, B, and C' (or without the Oxford comma)."""
    if len(items) == 2:
        return f"{items[0]} and {items[1]}"
    return ", ".join(items[:-1]) + ("," if oxford else "") + f" and {items[-1]}"


def respectively(names, solution, *, oxford: bool, roles_first: bool) -> str:
    people, roles = listing(list(names), oxford), listing([role(s) for s in solution], oxford)
    if roles_first:
        return f"The roles {roles} belong to {people}, respectively."
    return f"{people} are {roles}, respectively."


def name_role_table(names, solution, *, pad: str, reason: str) -> str:
    rows = [f"|{pad}{i + 1}{pad}|{pad}{n}{pad}|{pad}{role(s)[2:].title()}{pad}|{pad}{reason}{pad}|"
            for i, (n, s) in enumerate(zip(names, solution, strict=True))]
    return "\n".join(["| # | Name | Role | Reason |", "|---|:---|:---:|---|", *rows])


def role_column_table(names, solution, *, pad: str, per_row: int) -> str:
    knights = [n for n, s in zip(names, solution, strict=True) if s]
    knaves = [n for n, s in zip(names, solution, strict=True) if not s]
    rows = []
    for start in range(0, max(len(knights), len(knaves)), per_row):
        cells = (", ".join(knights[start:start + per_row]), ", ".join(knaves[start:start + per_row]))
        rows.append(f"|{pad}{cells[0]}{pad}|{pad}{cells[1]}{pad}|")
    return "\n".join(["| Knights | Knaves |", "| --- | --- |", *rows])


puzzles = st.integers(2, 8).flatmap(lambda n: st.tuples(
    st.permutations(COMMON_NAMES).map(lambda p: list(p[:n])), st.lists(st.booleans(), min_size=n, max_size=n)))
pads = st.sampled_from(["", " ", "  ", "\t"])
# what a reason column says: claims about anyone, never the answer
reasons = st.sampled_from(["", "lied about Zoey", "says Oliver is a knight and Emma is a knave", "knight/knave?"])
renderings = st.one_of(
    st.builds(lambda o, r: lambda n, s: respectively(n, s, oxford=o, roles_first=r), st.booleans(), st.booleans()),
    st.builds(lambda p, r: lambda n, s: name_role_table(n, s, pad=p, reason=r), pads, reasons),
    st.builds(lambda p, k: lambda n, s: role_column_table(n, s, pad=p, per_row=k), pads, st.integers(1, 3)),
)


@given(puzzles, renderings)
def test_renderings_grade_right(puzzle, render):
    names, solution = puzzle
    g = grade(T(render(names, solution)), names, solution)
    assert g.correct and g.n_right == len(names), (render(names, solution), g)


@given(puzzles, renderings, st.data())
def test_one_flipped_role_grades_wrong(puzzle, render, data):
    names, solution = puzzle
    i = data.draw(st.integers(0, len(names) - 1))
    flipped = [s != (j == i) for j, s in enumerate(solution)]
    g = grade(T(render(names, flipped)), names, solution)
    assert not g.correct and g.n_right == len(names) - 1, g


@given(puzzles, renderings, st.data(), st.booleans())
def test_an_invented_person_with_a_role_is_never_right(puzzle, render, data, knight):
    names, solution = puzzle
    stranger = data.draw(st.sampled_from([n for n in COMMON_NAMES if n not in names]))
    extra = f"{stranger} is {role(knight)}."
    answer = render(names, solution)
    g = grade(T(data.draw(st.sampled_from([f"{answer}\n{extra}", f"{extra}\n{answer}"]))), names, solution)
    assert not g.correct and stranger.lower() in g.invented, g


@given(puzzles, st.data(), st.sampled_from(["{n}: knight/knave", "{n} is a knight or a knave",
                                            "{n} is either a knight or a knave", "{n} - knave / knight"]))
def test_a_hedged_entry_leaves_that_person_undecided(puzzle, data, hedge):
    names, solution = puzzle
    i = data.draw(st.integers(0, len(names) - 1))
    lines = [hedge.format(n=n) if j == i else f"{n} is {role(s)}"
             for j, (n, s) in enumerate(zip(names, solution, strict=True))]
    g = grade(T("\n".join(lines)), names, solution)
    assert not g.correct and g.assignment[names[i]] is None, g


@given(puzzles, st.data())
def test_only_and_except_assign_everyone(puzzle, data):
    names, _ = puzzle
    odd = data.draw(st.integers(0, len(names) - 1))
    knight = data.draw(st.booleans())  # the odd one out's role; everyone else has the other
    solution = [knight if j == odd else not knight for j in range(len(names))]
    x, one, rest = names[odd], role(knight)[2:], role(not knight)[2:]
    answer = data.draw(st.sampled_from([f"Only {x} is a {one}.", f"{x} is the only {one}.",
                                        f"Everyone except {x} is a {rest}.", f"All but {x} are {rest}s."]))
    g = grade(T(answer), names, solution)
    assert g.correct, (answer, g)


@given(puzzles, st.data())
def test_reported_claims_in_a_verification_never_change_the_answer(puzzle, data):
    names, solution = puzzle
    speaker, *claimed = (data.draw(st.sampled_from(names)) for _ in range(3))
    claims = " and ".join(f"{n} is {role(data.draw(st.booleans()))}" for n in claimed)
    template = data.draw(st.sampled_from(["{s}'s statement that {c} is false.", "{s} says {c}, which is a lie.",
                                          '{s} said: "{c}" - false.', "According to {s}, {c}; that fails."]))
    answer = "\n".join(f"{n} is {role(s)}." for n, s in zip(names, solution, strict=True))
    g = grade(T(f"{answer}\n\nVerification: {template.format(s=speaker, c=claims)}"), names, solution)
    assert g.correct, g


def _records(columns: list[str]):
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real K&K records not found at {SHARED_DATA}")
    pq = pytest.importorskip("pyarrow.parquet")
    for path in sorted(SHARED_DATA.glob("*ppl/*.parquet")):
        yield from pq.read_table(path, columns=columns).to_pylist()


def test_a_copied_question_never_passes_on_any_real_record():
    passed = [r["quiz"] for r in _records(["quiz", "names", "solution"])
              if grade(T(r["quiz"]), r["names"], r["solution"]).correct]
    assert not passed, passed[:3]


def test_real_records_in_every_new_rendering():
    rng, failures, count = random.Random(0), [], 0
    for record in _records(["names", "solution"]):
        count += 1
        names, solution = record["names"], record["solution"]
        for answer in (respectively(names, solution, oxford=rng.random() < 0.5, roles_first=rng.random() < 0.5),
                       name_role_table(names, solution, pad=" ", reason="claims about others"),
                       role_column_table(names, solution, pad=" ", per_row=rng.randint(1, 3))):
            if not grade(T(answer), names, solution).correct:
                failures.append(answer)
    assert count == 5000
    assert not failures, failures[:3]
