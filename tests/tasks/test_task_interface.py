"""The task interface (curriculum/tasks/base.py) and its registry: records, rows, answer blocks,
decontamination keys, weights, and the errors a bad task config gets."""

from __future__ import annotations

import sys

import pytest
from omegaconf import OmegaConf

from core.checks import ConfigError
from curriculum.tasks import BUILT_IN, build_task, task_class
from curriculum.tasks.base import (
    AnswerGrade,
    Grade,
    TaskRecord,
    disjoint,
    final_answer_block,
    normalized_question,
    task_row,
)
from curriculum.tasks.kk.grading.grader import grade as kk_grade
from train.rewards.reward_group import weighted_rewards


@pytest.mark.parametrize(("columns", "error"), [
    ({"names": ["A"], "solution": [True]}, None),  # lists are what TRL rows hold
    ({"roles": {"A": True}}, "is a mapping"),  # a dict column: datasets would union its keys across rows
    ({"prompt": "x"}, "overwrite the row's own 'prompt'"),  # the row's prompt is the rendered text
    ({"level": "2ppl"}, "overwrite the row's own 'level'"),  # the level is the record's, not a column
])
def test_record_columns_refuse_what_would_break_a_row(columns, error):
    if error is None:
        assert TaskRecord("r", "2ppl", "q", columns).columns == columns
    else:
        with pytest.raises(ValueError, match=error):
            TaskRecord("r", "2ppl", "q", columns)


def test_a_row_is_prompt_id_level_and_columns():
    record = TaskRecord("2ppl-7", "2ppl", "quiz", {"names": ["A", "B"], "solution": [True, False], "ppl": 2})
    assert task_row(record, "<text>") == {"prompt": "<text>", "id": "2ppl-7", "level": "2ppl",
                                          "names": ["A", "B"], "solution": [True, False], "ppl": 2}


@pytest.mark.parametrize(("text", "block"), [
    ("<answer>5</answer>", "5"),
    ("<answer>4</answer> no, <answer>5</answer>", "5"),  # the final block is the answer
    ("<answer>5", None),  # never closed: no answer
    ("5</answer>", None),  # closed, never opened
    ("<answer></answer>", ""),  # an empty block is a block (its text is refused later)
    ("<answer>4</answer><answer>5", "4"),  # a re-opened, unclosed block does not erase the closed one
])
def test_final_answer_block(text, block):
    assert final_answer_block(text) == block


@pytest.mark.parametrize(("a", "b", "same"), [
    ("Tom has 3 apples.", "tom has 3 apples", True),  # case and punctuation are not the problem
    ("Tom  has\n3 apples", "Tom has 3 apples", True),  # nor is spacing
    ("Tom has 3 apples", "Tom has 4 apples", False),  # a number is
    ("Ｔｏｍ has ３ apples", "Tom has 3 apples", True),  # full-width letters and digits are the same text (NFKC)
])
def test_normalized_question(a, b, same):
    assert (normalized_question(a) == normalized_question(b)) is same


def test_disjoint_drops_held_out_problems_and_counts_them():
    train = [TaskRecord(f"t{i}", "x", q, {}) for i, q in enumerate(["A?", "B?", "a", "C"])]
    held = [TaskRecord("h", "x", "a!", {})]
    kept, removed = disjoint(train, held, lambda r: normalized_question(r.question))
    assert [r.id for r in kept] == ["t1", "t3"] and removed == 2  # "A?" and "a" are both "a"


@pytest.mark.parametrize(("weights", "error"), [
    ({"a": 1.0, "b": 0.5}, None),
    ({"a": 0, "b": 2}, None),  # a zero weight leaves its function out
    ({"c": 1.0}, r"reward.weights.c: unknown component"),  # a typo is named
    ({"a": -1.0}, r"reward.weights.a: -1.0 is negative, which rewards the opposite"),  # unless allowed
    ({"a": float("nan")}, r"reward.weights.a: nan"),
    ({"a": True}, r"reward.weights.a: True"),  # a bool is not a weight
    ({"a": 0, "b": 0}, "every weight is 0"),  # nothing to learn from
])
def test_weighted_rewards(weights, error):
    def a(completions, **kwargs):
        return [1.0] * len(completions)

    def b(completions, **kwargs):
        return [0.0] * len(completions)

    if error:
        with pytest.raises(ConfigError, match=error):
            weighted_rewards({"a": a, "b": b}, weights)
        return
    funcs, kept = weighted_rewards({"a": a, "b": b}, weights)
    expected = [(name, float(value)) for name, value in weights.items() if value]
    assert [(f.__name__, w) for f, w in zip(funcs, kept, strict=True)] == expected


def test_both_grade_kinds_meet_the_grade_protocol():
    assert isinstance(AnswerGrade(True, True, True, "5", 1.0, ()), Grade)
    assert isinstance(kk_grade("<answer>Zoey is a knight</answer>", ["Zoey"], [True], fmt="answer_only"), Grade)


def test_every_built_in_task_loads_by_its_old_name():
    assert {name: task_class(path).name for name, path in BUILT_IN.items()} == {name: name for name in BUILT_IN}


@pytest.mark.parametrize(("cfg", "error"), [
    ({"name": "gsm9k"}, r"task.name: 'gsm9k' is not a task; known: kk, gsm8k, reasoning_gym"),
    # an import path is looked up as Python would, and what it names must be a Task
    ({"_target_": "no_such_module.Task"}, r"task._target_: 'no_such_module.Task': no module no_such_module"),
    ({"_target_": "curriculum.tasks.base.TaskRecord"}, r"task._target_: .* is not a Task subclass"),
    ({"name": "gsm8k", "sorce": "hub"}, r"task.sorce: not a setting of task gsm8k"),
    ({"name": "gsm8k", "source": "web"}, r"task.source: 'web' is not one of hub, local, sample"),
    ({"name": "gsm8k", "source": "local"}, r"task.path: source=local needs a folder"),
    ({"name": "kk", "source": "hubb"}, r"task.source: 'hubb' is not one of generated, hub, local"),
    ({"name": "kk", "fmt": "x"}, r"task.fmt: not a setting of task kk"),  # the prompt's, never configured
])
def test_a_bad_task_config_is_named(cfg, error):
    with pytest.raises(ConfigError, match=error):
        build_task(cfg, fmt="think_answer")


def test_build_task_takes_a_composed_config():
    task = build_task(OmegaConf.create({"name": "gsm8k", "source": "sample"}))
    assert task.levels[-1] == "6+steps"


def test_without_reasoning_gym_only_its_task_is_refused_and_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # as if not installed: `import` raises ImportError
    assert build_task({"name": "gsm8k", "source": "sample"}).records("2steps", "test", n=1)
    assert build_task({"name": "kk"}, fmt="think_answer").records("2ppl", "test", n=1)
    # a ConfigError: the apps refuse it in one line, not a traceback
    with pytest.raises(ConfigError, match=r"^task: task=reasoning_gym needs reasoning-gym, an optional extra that is "
                                          r"not importable here \(.*\): pip install -e '\.\[rgym\]' "
                                          r"\(or pip install reasoning-gym==0\.1\.25\)$"):
        build_task({"name": "reasoning_gym", "dataset": "knights_knaves"})
