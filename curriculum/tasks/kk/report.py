"""How K&K's validation is shown: puzzles distinct up to renaming, exact accuracy (every person right) with
chance at 1/2^n, the lenient reading beside it, the reasoning rates, and the samples worth reading."""

from __future__ import annotations

from curriculum.tasks.base import Rate, TaskReport
from curriculum.tasks.kk.sources import KNOWN_PPL

LENIENT_NOTE = ("Strict accuracy above is the reward's verdict and the headline. The lenient one reads an answer given "
                "without tags by its last lines (after any reasoning block), with the same refusals of hedges, both "
                "roles and invented people: an instruct model that answers in prose scores here, not above.")

REPORT = TaskReport(
    record="puzzle",
    distinct="distinct puzzles up to renaming",
    pool_note="validation pools hold no two puzzles equal up to renaming the people",
    accuracy="exact: every person right",
    level_column="ppl",
    level_word="",  # "2ppl" says it: two people
    rates=(
        Rate("lenient_accuracy", "lenient", beside_accuracy=True, header="lenient %",
             title="Validation lenient accuracy (an untagged answer read by its final conclusion)",
             caption="an untagged final answer counts", note=LENIENT_NOTE),
        Rate("person_accuracy", "person accuracy"),
        # beside accuracy and length: does the reasoning support the answer (grading/reasoning.py)?
        Rate("reasoning_agrees_rate", "reasoning agrees", header="reasoning\nagrees %",
             title="Reasoning that agrees with the answer (share of completions whose reasoning settles at least "
                   "one person)",
             caption="of those whose reasoning settles someone",
             # rows from before `with_settling_reasoning` counted agreement over every completion with reasoning
             counted=("with_settling_reasoning", "with_reasoning")),
        Rate("reasoning_settles_nobody", "settles nobody", header="settles\nnobody %",
             title="Reasoning that settles nobody (share of completions with reasoning)",
             caption="of those with reasoning", counted=("with_reasoning",)),
        Rate("correct_but_disagrees", "right but disagreeing",
             title="Right answers whose reasoning says otherwise (share of all completions)"),
        Rate("invented_name_rate", "invented name", header="invented\nname %",
             title="Completions naming a person not in the puzzle (share of all completions)"),
    ),
    picks=(("reasoning disagrees with its answer", "reasoning_disagrees"), ("names an invented person", "invented")),
    facts=(("people right", "people_right"), ("lenient", "lenient_verdict"), ("invented", "invented")),
    sample_columns=("lenient_correct", "reasoning_agrees", "invented"),
    format_reward="format",
    chance={f"{n}ppl": 0.5 ** n for n in KNOWN_PPL},
    chance_note="chance for n people, 1/2^n (a guess of every role)",
)
