"""reasoning-gym's knights_knaves against our K&K engine, on 300 puzzles each way (60 of each of 2..6
people, the published depth 2 and width 2):

- its puzzles are puzzles our generator can draw (every statement in our sampler's menu for that
  speaker) and our solver finds exactly its solution;
- our puzzles get from its brute-force `find_solution` exactly our solution;
- our grader and its `score_answer` agree on its answers: right, one role flipped (its partial
  credit 0.3 + 0.7 x share right matches our n_right), people reordered, a person hedged.

The one difference: reasoning-gym words each puzzle with one of seven role pairs (knight/knave,
pioneer/laggard, saint/sinner, ...), where our data and grader use knight/knave. Its answers
are therefore graded here with their role words mapped to knight/knave (`_as_knights`); unmapped,
our grader reads only the knight/knave-worded ones (about one in seven).
"""

from __future__ import annotations

import pytest

reasoning_gym = pytest.importorskip("reasoning_gym",
                                    reason="reasoning-gym is an optional extra: pip install -e '.[rgym]'")

from reasoning_gym.logic.knights_knaves import KnightsKnavesDataset  # noqa: E402

from curriculum.tasks.kk import generate, parse_statements, solve  # noqa: E402
from curriculum.tasks.kk.generator import puzzle_space  # noqa: E402
from curriculum.tasks.kk.grading.grader import grade  # noqa: E402

PEOPLE = range(2, 7)
PER_SIZE = 60


def _their_puzzles(ppl: int):
    return reasoning_gym.create_dataset("knights_knaves", n_people=ppl, depth_constraint=2, width_constraint=2,
                                        seed=ppl, size=PER_SIZE)


@pytest.fixture(scope="module")
def theirs() -> list[tuple[object, dict]]:
    return [(dataset, entry) for ppl in PEOPLE for dataset in [_their_puzzles(ppl)] for entry in dataset]


def _as_knights(text: str, terms: dict) -> str:
    return text.replace(terms["a_knight"], "a knight").replace(terms["a_knave"], "a knave")


def _ours(entry: dict, answer: str):
    meta = entry["metadata"]
    return grade(f"<answer>{_as_knights(answer, meta['knight_knave_terms'])}</answer>", meta["names"],
                 list(meta["solution"]), fmt="answer_only")


def test_their_puzzles_are_ours_and_we_solve_them_alike(theirs):
    menus = {ppl: [set(menu.statements) for menu in puzzle_space(ppl, 2, 2).menus] for ppl in PEOPLE}
    drawable = solved_alike = 0
    for _, entry in theirs:
        statements, solution = entry["metadata"]["statements"], tuple(entry["metadata"]["solution"])
        speakers = menus[len(statements)]
        drawable += all(stmt in speakers[i] for i, stmt in enumerate(statements))
        solved_alike += solve(statements) == [solution]
    assert (len(theirs), drawable, solved_alike) == (300, 300, 300)


def test_they_solve_our_puzzles_alike():
    agree = total = 0
    for ppl in PEOPLE:
        for record in generate(ppl, PER_SIZE, seed=ppl):
            found = KnightsKnavesDataset.find_solution(parse_statements(record["statements"]))
            total += 1
            agree += [tuple(bool(x) for x in s) for s in found] == [tuple(record["solution"])]
    assert (total, agree) == (300, 300)


def test_the_graders_agree_on_their_answers(theirs):
    counts = {"right": 0, "flipped": 0, "reordered": 0, "hedged": 0, "unmapped_read": 0, "knight_worded": 0}
    for dataset, entry in theirs:
        meta, answer = entry["metadata"], entry["answer"]
        terms, ppl = meta["knight_knave_terms"], len(meta["names"])
        parts = answer.rstrip(".").replace(", and ", ", ").split(", ")
        swap = {terms["a_knight"]: terms["a_knave"], terms["a_knave"]: terms["a_knight"]}
        first_role = next(role for role in swap if parts[0].endswith(role))
        flipped = ", ".join([parts[0].removesuffix(first_role) + swap[first_role], *parts[1:]]) + "."
        reordered = ", ".join(reversed(parts)) + "."
        hedged = ", ".join([f"{meta['names'][0]} is {terms['a_knight']} or {terms['a_knave']}", *parts[1:]]) + "."
        mine = _ours(entry, flipped)
        counts["right"] += dataset.score_answer(answer, entry) == 1.0 and _ours(entry, answer).correct
        counts["flipped"] += (dataset.score_answer(flipped, entry) == pytest.approx(0.3 + 0.7 * (ppl - 1) / ppl)
                              and not mine.correct and mine.n_right == ppl - 1)
        counts["reordered"] += dataset.score_answer(reordered, entry) == 1.0 and _ours(entry, reordered).correct
        counts["hedged"] += dataset.score_answer(hedged, entry) == 0.0 and not _ours(entry, hedged).correct
        unmapped = grade(f"<answer>{answer}</answer>", meta["names"], list(meta["solution"]), fmt="answer_only")
        counts["unmapped_read"] += unmapped.correct
        counts["knight_worded"] += terms["knight"] == "knight"
    assert {k: v for k, v in counts.items() if k not in ("unmapped_read", "knight_worded")} == {
        "right": 300, "flipped": 300, "reordered": 300, "hedged": 300}
    # the one difference: unmapped, only the knight/knave-worded answers are read
    assert counts["unmapped_read"] == counts["knight_worded"] and 0 < counts["knight_worded"] < 100
