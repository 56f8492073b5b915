"""What K&K's validation rows and graded samples hold beyond every task's: people, reasoning, lenient reading.

Each graded completion is read three more ways than the grader's verdict: person by person (`n_right`),
by its reasoning (`grading/reasoning.py`: does the reasoning settle anyone, and agree with the answer;
people it invents) and leniently (`grading/lenient.py`: an untagged answer's final conclusion). A
subset's row then holds the shares of those (`subset_metrics`), each counted over the completions it
is about (agreement: those whose reasoning settles someone).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from core.stats import rounded_mean
from curriculum.tasks.kk.grading.grader import Grade
from curriculum.tasks.kk.grading.lenient import lenient_grade
from curriculum.tasks.kk.grading.reasoning import check_reasoning

#: The row columns `subset_metrics` adds to every task's.
METRIC_COLUMNS = ("lenient_accuracy", "person_accuracy", "reasoning_agrees_rate", "reasoning_settles_nobody",
                  "correct_but_disagrees", "invented_name_rate", "with_reasoning", "with_settling_reasoning")


def roles_text(names: Sequence[str], roles: Sequence[bool | None]) -> str:
    """ "Zoey knight, Oliver knave" from parallel names and roles (None: undecided).

    >>> roles_text(["Zoey", "Oliver"], [True, None])
    'Zoey knight, Oliver ?'
    """
    words = {True: "knight", False: "knave", None: "?"}
    return ", ".join(f"{name} {words[role]}" for name, role in zip(names, roles, strict=True))


def sample_fields(text: str, names: Sequence[str], solution: Sequence[bool], g: Grade, fmt: str) -> dict[str, Any]:
    """One graded completion's K&K fields: the people it got right, its reasoning's verdict, the people it
    invents, the lenient reading, and the answer and solution in words.

    >>> from curriculum.tasks.kk.grading.grader import grade
    >>> text = "<think>Zoey lies.</think><answer>Zoey is a knight</answer>"
    >>> f = sample_fields(text, ["Zoey"], [False], grade(text, ["Zoey"], [False]), "think_answer")
    >>> f["reasoning_disagrees"], f["answer"], f["reference"], f["people_right"]
    (True, 'Zoey knight', 'Zoey knave', '0/1')
    >>> bare = "<answer>Zoey is a knave</answer>"
    >>> f = sample_fields(bare, ["Zoey"], [False], grade(bare, ["Zoey"], [False]), "think_answer")
    >>> f["has_reasoning"], f["reasoning_agrees"] is None
    (False, True)
    """
    reasoning = check_reasoning(text, names, g.assignment, fmt)
    lenient = lenient_grade(text, names, solution, g)
    invented = sorted({*reasoning.invented, *g.invented})
    return {
        "n_right": g.n_right, "n_people": len(names), "people_right": f"{g.n_right}/{len(names)}",
        "assignment": g.assignment, "solution": list(solution), "names": list(names),
        "reference": roles_text(names, solution),
        "answer": roles_text(names, [g.assignment.get(n) for n in names]) if g.answered else None,
        "has_reasoning": reasoning.has_reasoning, "reasoning_claims": reasoning.settled,
        # agreement only where the reasoning settles someone: without reasoning (or one settling nobody) it is no
        # evidence either way, and a false there would read as a disagreement
        "reasoning_settles": reasoning.settles, "reasoning_agrees": reasoning.agrees if reasoning.settles else None,
        "reasoning_disagrees": reasoning.settles and g.answered and not reasoning.agrees,
        "invented": invented, "lenient_correct": lenient.correct, "lenient_assignment": lenient.assignment,
        "lenient_reason": lenient.reason,
        "lenient_verdict": "right" if lenient.correct else f"wrong ({lenient.reason})" if lenient.reason else "wrong",
    }


def subset_metrics(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The K&K columns of one subset's row, from its samples' `sample_fields`: the lenient accuracy, people
    right, and the reasoning rates: agreement over the completions whose reasoning settles someone (None when
    none does), settling nobody over those with reasoning (None when none has it), right but disagreeing and
    invented names over every completion, like accuracy.

    >>> rows = [{"correct": True, "lenient_correct": True, "n_right": 2, "n_people": 2, "has_reasoning": True,
    ...          "reasoning_settles": True, "reasoning_agrees": False, "invented": []},
    ...         {"correct": False, "lenient_correct": True, "n_right": 1, "n_people": 2, "has_reasoning": False,
    ...          "reasoning_settles": False, "reasoning_agrees": False, "invented": ["liam"]}]
    >>> m = subset_metrics(rows)
    >>> m["lenient_accuracy"], m["person_accuracy"], m["correct_but_disagrees"], m["invented_name_rate"]
    (1.0, 0.75, 0.5, 0.5)
    """
    settling = [s for s in samples if s["reasoning_settles"]]
    return {
        "lenient_accuracy": rounded_mean(float(s["lenient_correct"]) for s in samples),
        "person_accuracy": rounded_mean(s["n_right"] / s["n_people"] for s in samples if s["n_people"]),
        "reasoning_agrees_rate": rounded_mean(float(s["reasoning_agrees"]) for s in settling),
        "reasoning_settles_nobody": rounded_mean(float(not s["reasoning_settles"]) for s in samples
                                                 if s["has_reasoning"]),
        "correct_but_disagrees": rounded_mean(float(s["correct"] and s["reasoning_settles"]
                                                    and not s["reasoning_agrees"]) for s in samples),
        "invented_name_rate": rounded_mean(float(bool(s["invented"])) for s in samples),
        "with_reasoning": sum(bool(s["has_reasoning"]) for s in samples),
        "with_settling_reasoning": len(settling),
    }
