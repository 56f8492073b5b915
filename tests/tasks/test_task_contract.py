"""A user's task held to its contract when a run reads its config, before any model loads: each breach is one
line naming the member and what it returned (curriculum/tasks/__init__.py), instead of another error later
that names neither. The broken tasks are small subclasses of one good task, each breaking one member."""

from __future__ import annotations

import re

import pytest

from core.checks import ConfigError
from curriculum.tasks import check_task
from curriculum.tasks.base import AnswerGrade, Task, TaskRecord, check_split, final_answer_block
from tests.conftest import ROOT, run_cli
from train.settings import read_settings

HERE = "tests.tasks.test_task_contract"


def sum_reward(completions, answer, **kwargs) -> list[float]:
    return [float(final_answer_block(str(c)) == a) for c, a in zip(completions, answer, strict=True)]


class GoodTask(Task):
    """Sums of two one-digit numbers; the control: every check passes it."""

    name = "sums"
    levels = ("2terms", "3terms")
    supervised = True
    default_weights = {"sum": 1.0}

    def records(self, level, split, *, n=None, seed=0):
        terms = int(self.check_level(level)[0])
        check_split(split)
        return [TaskRecord(f"{level}-{split}-{i}", level, " + ".join(["1"] * terms) + f" + {i} = ?",
                           {"answer": str(terms + i)}) for i in range(8 if n is None else n)]

    def grade(self, completion, columns):
        got = final_answer_block(str(completion))
        right = got == columns["answer"]
        return AnswerGrade(right, got is not None, got is not None, got, float(right), ())

    def reward_functions(self, settings):
        return {"sum": sum_reward}

    def sft_target(self, record, fmt):
        return f"<answer>{record.columns['answer']}</answer>"


class IntLevels(GoodTask):
    levels = (2, 3)  # numbers, not keys: unchecked, a TypeError deep in the plan


class NoLevels(GoodTask):
    levels = ()  # unchecked: "curriculum.stages: must be a non-empty list", a key the user never wrote


class SpacedLevel(GoodTask):
    # a folder name and a config key: unchecked, an error naming a key and level never written
    levels = ("2 terms", "3terms")


class RepeatedLevel(GoodTask):
    levels = ("2terms", "2terms")  # two stages, two folders of one name


class DictRecords(GoodTask):
    def records(self, level, split, *, n=None, seed=0):  # plain dicts: unchecked, an AttributeError in the pools
        return [{"id": r.id, "question": r.question, "answer": r.columns["answer"]} for r in
                super().records(level, split, n=n, seed=seed)]


class NoTestRecords(GoodTask):
    def records(self, level, split, *, n=None, seed=0):  # no held-out records at 3terms: unchecked, "lower eval.n"
        return [] if (level, split) == ("3terms", "test") else super().records(level, split, n=n, seed=seed)


class NoneQuestion(GoodTask):
    def records(self, level, split, *, n=None, seed=0):  # unchecked: a TypeError when the prompt is rendered
        return [TaskRecord(r.id, r.level, None, r.columns) for r in super().records(level, split, n=n, seed=seed)]


class NoneGrade(GoodTask):
    def grade(self, completion, columns):  # forgot the return: validation failed on None.correct
        super().grade(completion, columns)


class IntGrade(GoodTask):
    def grade(self, completion, columns):  # 0/1 where a bool belongs: accuracy summed as numbers, format as truth
        g = super().grade(completion, columns)
        return AnswerGrade(int(g.correct), g.format_ok, g.answered, g.answer, g.score, g.reasons)


class StrReward(GoodTask):
    def reward_functions(self, settings):  # the name, not the function: unchecked, "'str' object has no attribute ..."
        return {"sum": "sum_reward"}


class WrongReference(GoodTask):
    def sft_target(self, record, fmt):  # a cold start would teach wrong sums
        return "<answer>0</answer>"


def task_of(cls: type[Task]) -> list[str]:
    return ["task=custom", f"task._target_={HERE}.{cls.__name__}"]


LADDER = ["+curriculum=ladder", "experiment=smoke"]
COLD_START = ["+curriculum=ladder", "experiment=smoke",
              "curriculum.stages=[{name: cold, kind: sft, level: 2terms, steps: 1, pool: 4}]"]

# (task, the run, the one line it must raise), each breaking the contract one way
CASES = [
    (IntLevels, LADDER, rf"^task: {HERE}.IntLevels.levels returned \(2, 3\): 2 is of type int, not a level key"),
    (NoLevels, LADDER, rf"^task: {HERE}.NoLevels.levels returned \(\); a task's levels are a non-empty tuple"),
    (SpacedLevel, LADDER, rf"^task: {HERE}.SpacedLevel.levels returned \('2 terms', '3terms'\): '2 terms' is not "
                          r"a level key \(letters, digits and _ \. \+ -, no '/' or spaces"),
    (RepeatedLevel, LADDER, rf"^task: {HERE}.RepeatedLevel.levels returned \('2terms', '2terms'\): '2terms' twice"),
    (DictRecords, LADDER, rf"^task: {HERE}.DictRecords.records\('2terms', 'train', n=1, seed=42\)\[0\] is a dict, "
                          r"not a TaskRecord"),
    (NoTestRecords, LADDER, rf"^task: {HERE}.NoTestRecords.records\('3terms', 'test', n=1, seed=1234\) returned "
                            r"no records, and the run uses 3terms \(test split\)"),
    (NoneQuestion, LADDER, rf"^task: {HERE}.NoneQuestion.records\('2terms', 'train', n=1, seed=42\)\[0\].question "
                           r"is None; a record's question is the text"),
    (NoneGrade, LADDER, rf"^task: {HERE}.NoneGrade.grade\('', <2terms-test-0 columns>\) returned None; it returns "
                        r"a Grade"),
    (IntGrade, LADDER, rf"^task: {HERE}.IntGrade.grade\('', <2terms-test-0 columns>\) returned AnswerGrade\("
                       r"correct=0, .*\): its correct is 0, not a bool"),
    (StrReward, LADDER, rf"^task: {HERE}.StrReward.reward_functions\(\)\['sum'\] is 'sum_reward', a str: a reward "
                        r"is a function"),
    (WrongReference, COLD_START, rf"^task: {HERE}.WrongReference.grade\(sft_target\('2terms-test-0', "
                                 r"'think_answer'\), <2terms-test-0 columns>\) is wrong"),
]


def test_the_good_task_passes_every_check(make_cfg):
    """The control: without it, a check that refused every task would pass every case below."""
    for run in (LADDER, COLD_START):
        settings = read_settings(make_cfg(*task_of(GoodTask), *run))
        assert settings.task.levels == ("2terms", "3terms")


@pytest.mark.parametrize(("cls", "run", "message"), CASES, ids=[case[0].__name__ for case in CASES])
def test_a_task_that_breaks_its_contract_is_refused_naming_the_member(make_cfg, cls, run, message):
    with pytest.raises(ConfigError, match=message) as refused:
        read_settings(make_cfg(*task_of(cls), *run))
    assert "\n" not in str(refused.value)


def test_a_task_built_outside_a_run_is_held_to_its_levels_too():
    """`build_task` checks the levels (python -m eval and the report build tasks without a plan)."""
    check_task(GoodTask())
    with pytest.raises(ConfigError, match=r"IntLevels\.levels returned \(2, 3\)"):
        check_task(IntLevels())


@pytest.mark.run
@pytest.mark.parametrize("cls", [IntLevels, StrReward])
def test_python_m_train_refuses_a_broken_task_in_one_line_leaving_no_run_folder(tmp_path, cls):
    done = run_cli("train", *task_of(cls), *LADDER, f"hydra.run.dir={tmp_path / 'run'}",
                   f"paths.cache_dir={tmp_path / 'cache'}", env={"PYTHONPATH": str(ROOT)}, timeout=300)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    message = next(m for c, _, m in CASES if c is cls)
    assert len(lines) == 1 and re.match(message.replace("^", "^config error: "), lines[0]), done.stderr[-2000:]
    assert not (tmp_path / "run").exists(), "no run folder"
    assert not (tmp_path / "cache").exists(), "no model built or loaded"
