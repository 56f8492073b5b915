"""Property tests of the grader: published renderings, single flips, robustness, and every real
K&K record (3-7 people) in every prompt format. Its linear time and throughput are `make bench` figures."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from curriculum.tasks.kk.grading.grader import FORMATS, grade

DATA = Path(__file__).resolve().parents[3] / "shared/data/kk-logic-rl"
# K&K's common names plus names that contain one another (Ava/Avery, Mia/Amelia, Ella/Isabella/Bella,
# Liam/William), and a two-word name, so whole-word, longest-first matching is exercised.
POOL = ["Ava", "Avery", "Mia", "Amelia", "Ella", "Isabella", "Bella", "Liam", "William", "Zoey", "Oliver",
        "Ethan", "Emma", "Noah", "Sofia", "Sophia", "Jack", "Jackson", "Luke", "Lucas", "Mary Ann", "Ann"]


def wrap(answer: str, fmt: str) -> str:
    """A well-formed completion of `fmt` around `answer`."""
    reasoning = "Assume each person is a knight and check for contradictions."
    if fmt == "answer_only":
        return f"<answer>{answer}</answer>"
    if fmt == "logic_rl":
        return f"{reasoning}</think><answer>{answer}</answer>"
    return f"<think>{reasoning}</think>\n<answer>{answer}</answer>"


def role(knight: bool) -> str:
    return "knight" if knight else "knave"


def solution_text(names, solution) -> str:
    """The published `solution_text` rendering (K&K data_gen_kk.py)."""
    parts = [f"{n} is a {role(s)}" for n, s in zip(names, solution, strict=True)]
    if len(parts) == 2:
        return f"{parts[0]}, and {parts[1]}."
    return ", ".join(parts[:-1]) + f", and {parts[-1]}."


def solution_text_format(names, solution) -> str:
    """The published `solution_text_format` rendering."""
    pairs = zip(names, solution, strict=True)
    return "\n".join(f"({i + 1}) {n} is a {role(s)}" for i, (n, s) in enumerate(pairs))


puzzles = st.integers(2, 8).flatmap(lambda n: st.tuples(
    st.permutations(POOL).map(lambda p: p[:n]), st.lists(st.booleans(), min_size=n, max_size=n)
))
renderings = st.sampled_from([solution_text, solution_text_format])


@given(puzzles, renderings, st.sampled_from(FORMATS))
def test_published_renderings_grade_correct(puzzle, render, fmt):
    names, solution = puzzle
    g = grade(wrap(render(names, solution), fmt), names, solution, fmt=fmt)
    assert g.correct and g.format_ok and g.n_right == len(names), g


@given(puzzles, renderings, st.data())
def test_any_single_flip_grades_wrong(puzzle, render, data):
    names, solution = puzzle
    i = data.draw(st.integers(0, len(names) - 1))
    flipped = [s != (j == i) for j, s in enumerate(solution)]
    g = grade(wrap(render(names, flipped), "think_answer"), names, solution)
    assert not g.correct and g.complete and g.n_right == len(names) - 1, g


@given(puzzles, st.randoms(use_true_random=False))
def test_order_of_people_does_not_matter(puzzle, rng):
    names, solution = puzzle
    order = list(range(len(names)))
    rng.shuffle(order)
    answer = solution_text_format([names[i] for i in order], [solution[i] for i in order])
    assert grade(wrap(answer, "think_answer"), names, solution).correct


FRAGMENTS = st.sampled_from([
    "<think>", "</think>", "<answer>", "</answer>", "<answer", "think>", " is a ", "knight", "knave", " not ",
    " or ", ", and ", "\n", "(1)", "**", "all", "the rest", "cannot determine", *POOL,
])
garbage = st.one_of(st.text(), st.lists(st.one_of(FRAGMENTS, st.text(max_size=5))).map("".join))


@settings(max_examples=300)
@given(garbage, puzzles, st.sampled_from(FORMATS))
def test_arbitrary_text_never_raises(text, puzzle, fmt):
    names, solution = puzzle
    g = grade(text, names, solution, fmt=fmt)
    assert set(g.assignment) == set(names)
    assert 0 <= g.n_right <= len(names)
    assert not (g.correct and not g.answered)


def _records():
    if not DATA.is_dir():
        pytest.skip(f"real K&K records not found at {DATA}")
    pq = pytest.importorskip("pyarrow.parquet")
    columns = ["names", "solution", "solution_text", "solution_text_format"]
    for path in sorted(DATA.glob("*ppl/*.parquet")):
        yield from pq.read_table(path, columns=columns).to_pylist()


def test_every_real_record_grades_correct_in_every_format():
    failures, count = [], 0
    for record in _records():
        count += 1
        for fmt in FORMATS:
            for key in ("solution_text", "solution_text_format"):
                g = grade(wrap(record[key], fmt), record["names"], record["solution"], fmt=fmt)
                if not (g.correct and g.format_ok):
                    failures.append((fmt, key, record[key], g.reasons))
    assert count == 5000
    assert not failures, failures[:5]
