"""Lenient accuracy (grading/grader.py lenient_grade): the final conclusion of an untagged answer, with the
strict grader's refusals."""

from __future__ import annotations

import pytest

from curriculum.tasks.kk import KKTask, kk_record
from curriculum.tasks.kk.grading.grader import MAX_LINES, grade, lenient_grade
from eval.generation import Completion
from eval.validation import grade_subset, subset_row

NAMES, SOLUTION = ["Zoey", "Oliver"], [False, True]  # Zoey is a knave, Oliver a knight

# (completion, strict right?, lenient right?): why
CASES = [
    # a tagged answer is the answer: both readings agree, right or wrong
    ("<think>Zoey lies.</think><answer>Zoey is a knave, Oliver is a knight.</answer>", True, True),
    ("<think>Hm.</think><answer>Zoey is a knight, Oliver is a knight.</answer> Zoey is a knave, Oliver is a knight.",
     False, False),  # text after the tagged answer never overrides it
    # untagged prose that concludes: strict reads nothing, lenient reads the conclusion
    ("Zoey says Oliver lies. If Zoey told the truth ... contradiction.\nTherefore Zoey is a knave and Oliver is a "
     "knight.", False, True),
    ("**Conclusion:**\n- Zoey is a knave\n- Oliver is a knight", False, True),  # a list, one person a line
    ("Is Zoey a knight? No.\nSo Zoey is a knave, and Oliver is a knight.", False, True),  # a question, then the answer
    ("<think>Zoey is a knight. Oliver too.</think>\nZoey is a knave and Oliver is a knight.", False, True),
    # the reasoning is not the answer: after </think> nothing concludes
    ("<think>Zoey is a knave and Oliver is a knight.</think>\nI hope this helps.", False, False),
    ("<think>Zoey lies.</think><answer>Zoey is a knave, Oliver is a knight", False, True),  # answer never closed
    # refusals, as the strict grader refuses them
    ("Zoey is a knave or a knight. Oliver is a knight.", False, False),  # a hedge
    ("Zoey is a knave and Oliver is a knight. Or the reverse.", False, False),  # a hedge that voids it all
    ("Zoey is a knight. Zoey is a knave and Oliver is a knight.", False, False),  # Zoey given both roles
    ("Zoey is a knave, Oliver is a knight, and Liam is a knave.", False, False),  # Liam is not in the puzzle
    ("Assume Zoey is a knave and Oliver is a knight.", False, False),  # an assumption is not a conclusion
    # wrong or incomplete conclusions
    ("So Zoey is a knight and Oliver is a knight.", False, False),  # concluded, wrongly
    ("Oliver is a knight.", False, False),  # Zoey never decided
    ("Zoey is a knave.\n" + "Let me check again.\n" * MAX_LINES + "Oliver is a knight.", False, False),  # too far
    ("", False, False),  # nothing at all
]


@pytest.mark.parametrize(("completion", "strict", "lenient"), CASES)
def test_lenient_reading(completion, strict, lenient):
    g = grade(completion, NAMES, SOLUTION)
    assert g.correct is strict
    assert lenient_grade(completion, NAMES, SOLUTION, g).correct is lenient


def test_validation_reports_both_and_strict_stays_the_headline():
    record = {"names": NAMES, "solution": SOLUTION, "index": 1, "quiz": "..."}
    outs = [Completion(text, tokens=10, truncated=False) for text, _, _ in CASES]
    task = KKTask(fmt="think_answer")
    samples = grade_subset([kk_record(record)], [outs], task)
    m = subset_row(task, "2ppl", samples)
    strict, lenient = sum(s for _, s, _ in CASES), sum(v for _, _, v in CASES)
    assert (m["accuracy"], m["lenient_accuracy"]) == (round(strict / len(CASES), 4), round(lenient / len(CASES), 4))
    assert lenient > strict  # the point: untagged right answers count only in the lenient column
    assert [s["lenient_correct"] for s in samples] == [v for _, _, v in CASES]
    assert samples[8]["lenient_reason"] == "Zoey hedged"  # why the lenient reading refused
