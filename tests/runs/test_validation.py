"""Validation metrics: their arithmetic on known verdicts, a recount from saved samples, and `python -m eval`."""

from __future__ import annotations

import json
import re

import pytest

from core.rundir.files import read_jsonl
from curriculum.tasks.kk import KKTask, kk_record
from curriculum.tasks.kk.grading.grader import check_reasoning, grade, lenient_grade
from eval.generation import Completion
from eval.metrics import METRIC_COLUMNS, subset_metrics
from eval.validation import grade_subset, subset_row
from tests.conftest import run_cli

# a K&K row's metrics: every task's and K&K's own
KK_COLUMNS = (*METRIC_COLUMNS, *KKTask.metric_columns)

NAMES, SOLUTION = ["Zoey", "Oliver"], [False, True]
RECORD = {"names": NAMES, "solution": SOLUTION, "index": 7, "quiz": "..."}


def _answer(body: str) -> str:
    return f"<think>reasoning</think><answer>{body}</answer>"


def test_metric_arithmetic_on_known_verdicts():
    completions = [[
        Completion(_answer("(1) Zoey is a knave\n(2) Oliver is a knight"), tokens=10, truncated=False),  # right
        Completion(_answer("(1) Zoey is a knight\n(2) Oliver is a knight"), tokens=20, truncated=False),  # 1 of 2
        Completion("<answer>Zoey is a knave, Oliver is a knight", tokens=30, truncated=True),  # unclosed: none
        Completion("Zoey is a knave and Oliver is a knight.", tokens=40, truncated=True),  # no tags: none
    ]]
    task = KKTask(fmt="think_answer")
    samples = grade_subset([kk_record(RECORD)], completions, task)
    m = subset_row(task, "2ppl", samples)
    assert m["n"] == 4 and m["puzzles"] == 1
    assert m["accuracy"] == 0.25
    assert m["person_accuracy"] == round((1 + 0.5 + 0 + 0) / 4, 4)
    assert m["format_rate"] == 0.5  # only the two closed think/answer completions
    assert m["answer_rate"] == 0.5
    assert m["mean_tokens"] == 25.0 and m["median_tokens"] == 25.0 and m["p90_tokens"] == 40.0
    assert m["truncation_rate"] == 0.5
    assert m["mean_tokens_correct"] == 10.0 and m["mean_tokens_wrong"] == 30.0
    assert m["pass_at_k"] == 1.0  # one puzzle, and one of its samples was right
    assert [s["correct"] for s in samples] == [True, False, False, False]
    assert all(s["reasons"] or s["correct"] for s in samples), "every wrong sample says why"


def test_mean_at_k_and_pass_at_k_differ():
    graded = {"format_ok": True, "answered": True, "tokens": 5, "truncated": False}
    samples = [{"id": "a", "correct": True, **graded}, {"id": "a", "correct": False, **graded},
               {"id": "b", "correct": False, **graded}, {"id": "b", "correct": False, **graded}]
    m = subset_metrics(samples)
    assert m["accuracy"] == 0.25 and m["pass_at_k"] == 0.5
    assert m["mean_tokens_correct"] == 5.0


def test_empty_subset_is_an_error():
    with pytest.raises(ValueError, match="no completions"):
        subset_metrics([])


@pytest.mark.run
def test_smoke_ladder_rows_agree_with_a_recount_from_samples(smoke_ladder):
    run_dir, _ = smoke_ladder
    stage_dirs = {0: "0-baseline"} | {
        s["index"]: f"{s['index']}-{s['name']}" for s in json.loads((run_dir / "run.json").read_text())["stages"]}
    rows = read_jsonl(run_dir / "validation.jsonl")
    assert rows and all(set(KK_COLUMNS) <= set(r) for r in rows)
    task = KKTask(fmt="think_answer")
    for row in rows:
        samples = read_jsonl(run_dir / "samples" / stage_dirs[row["stage"]] / f"{row['ppl']}ppl.jsonl")
        regraded = []
        for s in samples:
            g = grade(s["completion"], s["names"], s["solution"], fmt="think_answer")
            r = check_reasoning(s["completion"], s["names"], g.assignment, "think_answer")
            assert g.correct == s["correct"] and g.format_ok == s["format_ok"]
            assert (r.agrees if r.settles else None, r.settles) == (s["reasoning_agrees"], s["reasoning_settles"])
            assert sorted({*r.invented, *g.invented}) == s["invented"]
            lenient = lenient_grade(s["completion"], s["names"], s["solution"], g)
            assert lenient.correct == s["lenient_correct"]
            regraded.append({"id": s["id"], "correct": g.correct, "format_ok": g.format_ok, "answered": g.answered,
                             "tokens": s["tokens"], "truncated": s["truncated"], "n_right": g.n_right,
                             "n_people": s["n_people"], "has_reasoning": r.has_reasoning, "reasoning_agrees": r.agrees,
                             "reasoning_settles": r.settles, "invented": s["invented"],
                             "lenient_correct": lenient.correct})
        recount = subset_row(task, row["level"], regraded)
        assert {k: row[k] for k in KK_COLUMNS} == {k: recount[k] for k in KK_COLUMNS}


@pytest.mark.run
def test_python_m_eval_reproduces_a_stage(smoke_ladder, cache_dir, tmp_path):
    run_dir, _ = smoke_ladder
    stage = json.loads((run_dir / "run.json").read_text())["stages"][1]
    out = tmp_path / "eval"
    done = run_cli("eval", f"model={run_dir / stage['checkpoint']}", "experiment=smoke", f"paths.cache_dir={cache_dir}",
                   f"hydra.run.dir={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    expected = {r["ppl"]: r for r in read_jsonl(run_dir / "validation.jsonl") if r["stage"] == stage["index"]}
    got = {r["ppl"]: r for r in read_jsonl(out / "validation.jsonl")}
    # python -m eval validates every subset; the run, after this stage, those near it (eval.subsets_after_stage)
    assert expected and set(expected) <= set(got) == {2, 3}
    for ppl, row in expected.items():
        assert {k: got[ppl][k] for k in KK_COLUMNS} == {k: row[k] for k in KK_COLUMNS}
    # the mean over the subsets, with its 95% interval and the puzzles behind it (4 a subset)
    assert re.search(r"mean accuracy over 2 subsets: \d\.\d{3} \[\d\.\d\d, \d\.\d\d\] n=8", done.stdout), done.stdout


@pytest.mark.run
def test_validation_every_n_steps_inside_a_stage(tmp_path, make_cfg):
    from train.run.runner import run_curriculum
    from train.settings import read_settings

    run_dir = tmp_path / "run"
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke", "eval.every=2", "limits.max_steps=4",
                   "curriculum.stages=[{name: a, ppl: 2, steps: 4, pool: 8}, {name: b, ppl: 3, steps: 4, pool: 8}]")
    run_curriculum(read_settings(cfg), run_dir)
    rows = read_jsonl(run_dir / "validation_steps.jsonl")
    # step 4 is each stage's last: the stage-end validation covers it
    assert [(r["stage"], r["stage_step"], r["global_step"], r["ppl"]) for r in rows] == [(1, 2, 2, 2), (2, 2, 6, 3)]
    assert all(set(KK_COLUMNS) <= set(r) and r["n"] == 4 for r in rows)
