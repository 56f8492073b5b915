"""A task held to its contract (`curriculum.tasks.base.Task`) before any model loads: each breach is one
ConfigError line naming the member and what it returned, where it would otherwise surface later as
another error (a TypeError in a pool, an AttributeError in a reward, a key the user never wrote).

Three checks, each run where what it needs is first known:

- `check_task` (by `build_task`): the members that need no data: `levels`, `validation_levels`.
- `check_reward_functions` (by the reward group, when the run's rewards are built from its config):
  `reward_functions` returns callables by component name.
- `check_records` (by `read_settings`, once the plan is known, and by `python -m eval` for the subsets it
  validates): one record of each level and split the run uses (`records(..., n=1)`), and `grade` of an
  empty completion and, where a supervised stage trains on them, of the task's reference response on
  that record.

Not checked here: a reward that changes its inputs (appends to `completions`): finding it before training
means calling the user's reward with made-up inputs TRL would not pass (prompts, completion ids, the
trainer's state), which could refuse a reward that is right. Training finds it at its first call instead,
where each reward call is checked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from core.checks import ConfigError
from curriculum.tasks.base import ALL, LEVEL_KEY, Task, TaskRecord

if TYPE_CHECKING:  # the plan imports the tasks, so only its type is named here
    from curriculum.plan import Stage


def _member(task: Task, member: str) -> str:
    """ "task: my_pkg.MyTask.levels", the one place a breach is named from."""
    cls = type(task)
    return f"task: {cls.__module__}.{cls.__qualname__}.{member}"


def check_task(task: Task) -> Task:
    """`task` when its levels are a non-empty sequence of distinct level keys, and its `validation_levels`
    are among them; ConfigError naming the member otherwise."""
    levels = task.levels
    where = _member(task, "levels")
    if isinstance(levels, (str, bytes)) or not isinstance(levels, Sequence) or not levels:
        raise ConfigError(f"{where} returned {levels!r}; a task's levels are a non-empty tuple of level keys, "
                          "easiest first")
    for level in levels:
        if not isinstance(level, str):
            raise ConfigError(f"{where} returned {levels!r}: {level!r} is of type {type(level).__name__}, not a "
                              "level key (a str such as '2digits')")
        if not LEVEL_KEY.fullmatch(level):
            raise ConfigError(f"{where} returned {levels!r}: {level!r} is not a level key (letters, digits and "
                              "_ . + -, no '/' or spaces: it names a stage, a folder and a config key)")
    repeated = [level for i, level in enumerate(levels) if level in levels[:i]]
    if repeated:
        raise ConfigError(f"{where} returned {levels!r}: {repeated[0]!r} twice")
    extra = [level for level in task.validation_levels if level not in levels]
    if extra:
        raise ConfigError(f"{_member(task, 'validation_levels')} returned {tuple(task.validation_levels)!r}: "
                          f"{extra[0]!r} is not one of its levels")
    return task


def check_reward_functions(task: Task, functions) -> dict:
    """`functions` (what `task.reward_functions(settings)` returned) when it maps component names to
    callables; ConfigError naming the member and the component otherwise."""
    where = _member(task, "reward_functions()")
    if not isinstance(functions, Mapping):
        raise ConfigError(f"{where} returned a {type(functions).__name__}; it returns {{component name: reward "
                          "function}}")
    for name, function in functions.items():
        if not isinstance(name, str) or not callable(function):
            raise ConfigError(f"{where}[{name!r}] is {function!r}, a {type(function).__name__}: a reward is a "
                              "function f(completions, **columns) -> list[float]")
    return dict(functions)


def check_records(task: Task, plan: Sequence[Stage], subsets: Iterable[str], fmt, *, seeds: tuple) -> None:
    """One record of each level and split the run reads is a TaskRecord of that level with a question, and the
    task grades it (`check_grade`, in the prompt's answer format `fmt`); ConfigError naming the call and what it
    returned otherwise. Training reads every stage's levels (its replay too) from "train" with `seeds[0]`
    (`seed`); validation holds out `subsets` and every level trained on, from "test" with `seeds[1]` (`eval.seed`)."""
    trained = list(dict.fromkeys(level for stage in plan for level in stage.pool_weights))
    held_out = [level for level in task.levels if level in {*subsets, *trained}]
    seed, eval_seed = (int(value) for value in seeds)
    # a reference response is read only by a supervised stage (GSM8K's exist in one answer format only)
    references = task.supervised and any(stage.kind_facts.supervised for stage in plan)
    for level in trained:
        _first_record(task, level, "train", seed)
    for level in held_out:
        check_grade(task, _first_record(task, level, "test", eval_seed), str(fmt), reference=references)


def _first_record(task: Task, level: str, split: str, seed: int) -> TaskRecord:
    where = _member(task, f"records({level!r}, {split!r}, n=1, seed={seed})")
    got = task.records(level, split, n=1, seed=seed)
    if isinstance(got, (str, bytes, Mapping)) or not isinstance(got, Sequence):
        raise ConfigError(f"{where} returned a {type(got).__name__}; it returns a list of TaskRecord")
    if not got:
        raise ConfigError(f"{where} returned no records, and the run uses {level} ({split} split)")
    record = got[0]
    if not isinstance(record, TaskRecord):
        raise ConfigError(f"{where}[0] is a {type(record).__name__}, not a TaskRecord (curriculum.tasks.base)")
    if not isinstance(record.question, str) or not record.question.strip():
        raise ConfigError(f"{where}[0].question is {record.question!r}; a record's question is the text its "
                          "prompt holds")
    if level != ALL and record.level != level:
        raise ConfigError(f"{where}[0].level is {record.level!r}, not {level!r}")
    if not isinstance(record.id, str) or not record.id:
        raise ConfigError(f"{where}[0].id is {record.id!r}; a record's id is a non-empty str")
    missing = [column for column in task.columns if column not in record.columns]
    if missing:
        raise ConfigError(f"{where}[0].columns has no {missing[0]!r}, one of the task's columns "
                          f"({', '.join(task.columns)}), which TRL hands every reward")
    return record


def check_grade(task: Task, record: TaskRecord, fmt: str, *, reference: bool) -> None:
    """`grade` of an empty completion returns a Grade (correct and format_ok are bools); with `reference` (a
    supervised stage will train on them), the task's reference response on `record` grades right."""
    answers = {"''": ""}
    if reference:
        answers[f"sft_target({record.id!r}, {fmt!r})"] = task.sft_target(record, fmt)
    for shown, completion in answers.items():
        where = _member(task, f"grade({shown}, <{record.id} columns>)")
        if not isinstance(completion, str):
            raise ConfigError(f"{_member(task, shown)} returned a {type(completion).__name__}, not the text of a "
                              "completion")
        grade = task.grade(completion, record.columns)
        if grade is None:
            raise ConfigError(f"{where} returned None; it returns a Grade (correct, format_ok, answered, reasons)")
        for field in ("correct", "format_ok"):
            value = getattr(grade, field, None)
            if not isinstance(value, bool):
                raise ConfigError(f"{where} returned {grade!r}: its {field} is {value!r}, not a bool")
        if completion and not grade.correct:
            raise ConfigError(f"{where} is wrong ({'; '.join(map(str, getattr(grade, 'reasons', ())))}): a "
                              "reference response must grade right")
