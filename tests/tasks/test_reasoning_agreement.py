"""Reasoning that agrees with the answer: the reasoning's last claims (the grader's own parser), and
the three validation metrics' arithmetic on completions with known answers."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from curriculum.tasks.kk import KKTask, kk_record
from curriculum.tasks.kk.grading.claims import read_claims
from curriculum.tasks.kk.grading.grader import check_reasoning, grade
from eval.generation import Completion
from eval.report import write_report
from eval.validation import grade_subset, results_table, subset_row
from tests.conftest import SHARED_DATA

NAMES, SOLUTION = ["Aiden", "Zoey"], [False, True]  # Aiden knave, Zoey knight
RIGHT = "<answer>Aiden is a knave, and Zoey is a knight.</answer>"
UNSET = None

LAST_CLAIMS = [
    # the last definite claim wins over earlier ones
    ("Aiden is a knight. Zoey is a knave. Wait: Aiden is a knave and Zoey is a knight.", (False, True)),
    # a supposition and its branch's conditional are no claims; the conclusion is
    ("Assume Aiden is a knight. If so, Zoey would be a knave. Contradiction, so Aiden is a knave.", (False, UNSET)),
    # a reported claim is no claim about its subject
    ("Aiden says that Zoey is a knave. Zoey is a knight.", (UNSET, True)),
    # a hedged sentence is no definite claim, and it does not erase an earlier one
    ("Zoey is a knight. Aiden might be a knight or a knave.", (UNSET, True)),
    ("Aiden is a knave. Maybe Aiden is a knight.", (False, UNSET)),
    # the K&K chain-of-thought wording: a backtracking search ends on the assumptions that held
    ("Assume Aiden is a knight. Zoey cannot be a knight, because this would contradict the claim of Aiden. "
     "Assume Aiden is a knave. Assume Zoey is a knight. No contradiction is found in their claim.", (False, True)),
    # the same phrasings as the grader: negation, collectives, "only"
    ("Aiden is not a knight, and Zoey is not a knave.", (False, True)),
    ("Only Zoey is a knight.", (False, True)),
    # a reasoning that settles nobody
    ("Let me think about the statements one by one.", (UNSET, UNSET)),
]


@pytest.mark.parametrize(("reasoning", "expected"), LAST_CLAIMS)
def test_last_claims(reasoning, expected):
    assert tuple(read_claims(reasoning, NAMES).last().values()) == expected


def think(reasoning: str, answer: str = RIGHT) -> str:
    return f"<think>{reasoning}</think>\n{answer}"


CHECKS = [
    # (completion, fmt, has reasoning, settles someone, agrees, invented); the answer is the grader's
    # the reasoning concludes what the answer says
    (think("So Aiden is a knave and Zoey is a knight."), "think_answer", True, True, True, ()),
    # the reasoning concludes the opposite about Aiden: a right answer by wrong reasoning
    (think("Therefore Aiden is a knight. Zoey is a knight."), "think_answer", True, True, False, ()),
    # people the reasoning never settles do not count against it, once it settles someone ("tells the truth")
    (think("Zoey tells the truth."), "think_answer", True, True, True, ()),
    # a reasoning that settles nobody is no evidence for the answer: it neither agrees nor disagrees
    (think("Aiden's statement mentions Zoey."), "think_answer", True, False, False, ()),
    (think("Let me think about the statements one by one."), "think_answer", True, False, False, ()),
    # an answer that leaves a settled person undecided does not agree
    (think("Aiden is a knave; Zoey is a knight.", "<answer>Zoey is a knight.</answer>"), "think_answer", True,
     True, False, ()),
    # no reasoning block: an empty one, an unclosed one, the answer_only format
    (think("   "), "think_answer", False, False, False, ()),
    ("<think>Aiden is a knave" + RIGHT, "think_answer", False, False, False, ()),
    (RIGHT, "answer_only", False, False, False, ()),
    # logic_rl: the reasoning is the text before </think>
    ("Aiden lies, so Zoey is a knight.</think>" + RIGHT, "logic_rl", True, True, True, ()),
    # a K&K name from outside the puzzle, mentioned or given a role
    (think("Like Oliver in the example, Aiden is a knave; Zoey is a knight."), "think_answer", True, True, True,
     ("oliver",)),
    (think("Aiden is a knave, Zoey is a knight and Quentin is a knave."), "think_answer", True, True, True,
     ("quentin",)),
]


@pytest.mark.parametrize(("completion", "fmt", "has_reasoning", "settles", "agrees", "invented"), CHECKS)
def test_check_reasoning(completion, fmt, has_reasoning, settles, agrees, invented):
    g = grade(completion, NAMES, SOLUTION, fmt=fmt)
    r = check_reasoning(completion, NAMES, g.assignment, fmt)
    assert (r.has_reasoning, r.settles, r.agrees, r.invented) == (has_reasoning, settles, agrees, invented), r


def test_the_published_chains_of_thought_agree_with_their_solutions():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real K&K records not found at {SHARED_DATA}")
    pq = pytest.importorskip("pyarrow.parquet")
    columns = ["names", "solution", "cot_head", "cot_repeat_steps", "cot_foot", "solution_text_format"]
    disagree, count = [], 0
    for path in sorted(SHARED_DATA.glob("*ppl/*.parquet")):
        for r in pq.read_table(path, columns=columns).to_pylist():
            count += 1
            cot = " ".join([r["cot_head"], *r["cot_repeat_steps"], r["cot_foot"]])
            text = f"<think>{cot}</think><answer>{r['solution_text_format']}</answer>"
            check = check_reasoning(text, r["names"], grade(text, r["names"], r["solution"]).assignment, "think_answer")
            if not check.agrees or check.invented:
                disagree.append(cot)
    assert count == 5000 and not disagree, disagree[:2]


def test_metric_arithmetic_on_known_completions():
    record = {"names": NAMES, "solution": SOLUTION, "index": 3, "quiz": "..."}
    outs = [Completion(text, tokens=10, truncated=False) for text in (
        think("So Aiden is a knave and Zoey is a knight."),  # right, agrees
        think("Hence Aiden is a knight, and Zoey is a knight."),  # right, disagrees
        think("Aiden is a knight; Zoey is a knight.", "<answer>Both are knights.</answer>"),  # wrong, agrees
        RIGHT,  # right, no reasoning
        think("Aiden is a knave and Zoey is a knight, unlike Liam.",  # right, agrees, invents Liam
              "<answer>Aiden is a knave; Zoey is a knight; Liam is a knave.</answer>"),  # ... so wrong
        think("Let me read the statements again."),  # right, its reasoning settles nobody
    )]
    task = KKTask(fmt="think_answer")
    samples = grade_subset([kk_record(record)], [outs], task)
    m = subset_row(task, "2ppl", samples)
    assert [s["correct"] for s in samples] == [True, True, False, True, False, True]
    assert m["accuracy"] == 0.6667
    # 3 of the 4 whose reasoning settles someone (the one that settles nobody counted as agreeing before)
    assert m["reasoning_agrees_rate"] == 0.75 and m["with_settling_reasoning"] == 4
    assert m["reasoning_settles_nobody"] == 0.2 and m["with_reasoning"] == 5  # 1 of the 5 with reasoning
    assert m["correct_but_disagrees"] == 0.1667  # 1 of all 6: the one that settles nobody does not disagree
    assert m["invented_name_rate"] == 0.1667  # 1 of all 6
    assert samples[1]["reasoning_claims"] == {"Aiden": True, "Zoey": True} and not samples[1]["reasoning_agrees"]
    assert samples[4]["invented"] == ["liam"] and samples[3]["has_reasoning"] is False
    # no reasoning, or reasoning that settles nobody: agreement is empty, not a disagreement
    assert samples[3]["reasoning_agrees"] is None and samples[5]["reasoning_agrees"] is None
    assert samples[0]["question"] == record["quiz"]  # every sample carries the puzzle it answers


def test_the_results_table_prints_the_reasoning_metrics():
    record = {"names": NAMES, "solution": SOLUTION, "index": 3, "quiz": "..."}
    task = KKTask(fmt="think_answer")
    samples = grade_subset([kk_record(record)], [[Completion(think("Aiden lies."), tokens=5, truncated=False)]], task)
    console = Console(width=100, record=True)
    console.print(results_table([subset_row(task, "2ppl", samples)], "t", task.report))
    text = console.export_text()
    # short headers at 100 columns: the reasoning rates, each a % with its interval over 1 puzzle
    assert all(k in text for k in ("reasoning", "agrees %", "settles", "nobody %", "invented", "name %"))
    assert "100 (21-100)" in text and "0 (0-79)" in text  # agrees 1/1 ("Aiden lies" settles him); nobody 0/1
    # a lenient column that repeats accuracy is left out, and the caption says so
    assert "lenient %" not in text and "lenient: equal to accuracy here" in " ".join(text.split())
    assert max(map(len, text.splitlines())) <= 100


def test_the_report_shows_the_reasoning_metrics_per_stage(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    stage = {"index": 1, "name": "2ppl", "level_label": "2ppl", "status": "done", "steps_budget": 2, "steps_done": 2,
             "global_step_start": 0, "global_step_end": 2, "final_metrics": {}}
    (run / "run.json").write_text(json.dumps({"status": "done", "curriculum": "kk_ladder", "stages": [stage],
                                                     "task_report": KKTask.report.as_json()}))
    (run / "config.yaml").write_text("objective: mean_final_accuracy\n")
    (run / "metrics.jsonl").write_text("")
    rows = [{"stage": s, "stage_name": name, "global_step": 2 * s, "level": "2ppl", "accuracy": 0.5,
             "mean_tokens": 90.0, "format_rate": 1.0, "reasoning_agrees_rate": agrees, "correct_but_disagrees": 0.125,
             "invented_name_rate": 0.25, "n": 8} for s, name, agrees in ((0, "baseline", 0.375), (1, "2ppl", 0.875))]
    (run / "validation.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = (write_report(run) / "report.md").read_text()
    for title in ("Reasoning that agrees with the answer", "Right answers whose reasoning says otherwise",
                  "Completions naming a person not in the puzzle"):
        assert title in report
    assert "0.375" in report and "0.875" in report and "0.125" in report and "0.25" in report
