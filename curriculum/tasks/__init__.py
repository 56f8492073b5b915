"""Tasks behind one interface (`curriculum.tasks.base`): K&K, GSM8K, reasoning-gym datasets and a user's own, built
from a task config (`build_task`: ``_target_`` an import path, or a built-in's ``name``; imported only when built)
and held to their contract before any model loads, each breach one ConfigError naming the member (a reward that
changes its inputs is found at its first call instead); the built-in tasks' files are read by `jsonl_rows`.
"""

from __future__ import annotations

import importlib
import inspect
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from core.checks import ConfigError
from curriculum.tasks.base import ALL, RecordError, Task, TaskRecord, check_level_key

if TYPE_CHECKING:  # the plan imports the tasks, so only its type is named here
    from curriculum.plan import Stage

#: The built-in tasks by their short name: a task config may name one by `name` instead of its `_target_`.
BUILT_IN = {"kk": "curriculum.tasks.kk.KKTask", "gsm8k": "curriculum.tasks.gsm8k.GSM8KTask",
            "reasoning_gym": "curriculum.tasks.rgym.ReasoningGymTask"}


def task_class(path: str, key: str = "task._target_") -> type[Task]:
    """The Task subclass at import path `path` ("my_pkg.tasks.MyTask"); ConfigError naming `key` otherwise.

    >>> task_class("curriculum.tasks.gsm8k.GSM8KTask").name
    'gsm8k'
    >>> task_class("curriculum.tasks.gsm8k.Nothing")
    Traceback (most recent call last):
    core.checks.ConfigError: task._target_: 'curriculum.tasks.gsm8k.Nothing': curriculum.tasks.gsm8k has no Nothing
    """
    module, _, attr = str(path).rpartition(".")
    try:
        found = getattr(importlib.import_module(module), attr) if module else None
    except ModuleNotFoundError as err:
        raise ConfigError(f"{key}: {path!r}: no module {err.name} (is its folder on PYTHONPATH?)") from err
    except AttributeError:
        raise ConfigError(f"{key}: {path!r}: {module} has no {attr}") from None
    if not (isinstance(found, type) and issubclass(found, Task)):
        raise ConfigError(f"{key}: {path!r} is not a Task subclass (curriculum.tasks.base.Task)")
    return found


def build_task(task_cfg: Mapping, *, fmt: str | None = None) -> Task:
    """The task a task config describes, held to its contract; `fmt` goes to a class that takes it.

    >>> build_task({"_target_": "curriculum.tasks.gsm8k.GSM8KTask", "source": "sample"}).levels
    ('2steps', '3steps', '4steps', '5steps', '6+steps')
    >>> build_task({"name": "gsm8k", "sorce": "hub"})
    Traceback (most recent call last):
    core.checks.ConfigError: task.sorce: not a setting of task gsm8k; settings: source, path, hub_id, hub_config
    """
    if isinstance(task_cfg, DictConfig):
        task_cfg = OmegaConf.to_container(task_cfg, resolve=True)
    settings = {str(k): v for k, v in task_cfg.items() if k not in ("_target_", "name")}
    if task_cfg.get("_target_") is not None:
        cls = task_class(str(task_cfg["_target_"]), "task._target_")
    elif task_cfg.get("name") in BUILT_IN:
        cls = task_class(BUILT_IN[task_cfg["name"]], "task.name")
    else:
        raise ConfigError(f"task.name: {task_cfg.get('name')!r} is not a task; known: {', '.join(BUILT_IN)} "
                          "(or task=custom task._target_=<your module.YourTask>)")
    cls.check_installed()  # an optional extra it needs, named in one line (not its import's traceback)
    params = [p for p in inspect.signature(cls).parameters if p != "fmt"]
    for name in settings:
        if name not in params:
            raise ConfigError(f"task.{name}: not a setting of task {cls.name}; settings: {', '.join(params)}")
    injected = {"fmt": fmt} if fmt is not None and "fmt" in inspect.signature(cls).parameters else {}
    return check_task(cls(**settings, **injected))


def _member(task: Task, member: str) -> str:
    """ "task: my_pkg.MyTask.levels", the one place a breach is named from."""
    cls = type(task)
    return f"task: {cls.__module__}.{cls.__qualname__}.{member}"


def check_task(task: Task) -> Task:
    """`task` when its levels are distinct level keys and hold its `validation_levels`; ConfigError otherwise."""
    levels = task.levels
    where = _member(task, "levels")
    if isinstance(levels, (str, bytes)) or not isinstance(levels, Sequence) or not levels:
        raise ConfigError(f"{where} returned {levels!r}; a task's levels are a non-empty tuple of level keys, "
                          "easiest first")
    for level in levels:
        if not isinstance(level, str):
            raise ConfigError(f"{where} returned {levels!r}: {level!r} is of type {type(level).__name__}, not a "
                              "level key (a str such as '2digits')")
        check_level_key(level, f"{where} returned {levels!r}")
    repeated = [level for i, level in enumerate(levels) if level in levels[:i]]
    if repeated:
        raise ConfigError(f"{where} returned {levels!r}: {repeated[0]!r} twice")
    extra = [level for level in task.validation_levels if level not in levels]
    if extra:
        raise ConfigError(f"{_member(task, 'validation_levels')} returned {tuple(task.validation_levels)!r}: "
                          f"{extra[0]!r} is not one of its levels")
    return task


def check_reward_functions(task: Task, functions) -> dict:
    """`functions` (from `task.reward_functions`) when it maps names to callables; ConfigError otherwise."""
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
    """A record of each level and split the run reads is a TaskRecord that grades (a reference response: right)."""
    trained = list(dict.fromkeys(level for stage in plan for level in stage.pool_weights))
    held_out = [level for level in task.levels if level in {*subsets, *trained}]
    seed, eval_seed = (int(value) for value in seeds)
    # a reference response is read only by a supervised stage (GSM8K's exist in one answer format only)
    references = task.supervised and any(stage.kind_facts.supervised for stage in plan)
    for level in trained:
        _first_record(task, level, "train", seed)
    for level in held_out:
        record = _first_record(task, level, "test", eval_seed)
        answers = {"''": ""}
        if references:
            answers[f"sft_target({record.id!r}, {str(fmt)!r})"] = task.sft_target(record, str(fmt))
        for shown, completion in answers.items():
            where = _member(task, f"grade({shown}, <{record.id} columns>)")
            if not isinstance(completion, str):
                raise ConfigError(f"{_member(task, shown)} returned a {type(completion).__name__}, not the text of "
                                  "a completion")
            grade = task.grade(completion, record.columns)
            if grade is None:
                raise ConfigError(f"{where} returned None; it returns a Grade (correct, format_ok, answered, "
                                  "reasons)")
            for field in ("correct", "format_ok"):
                value = getattr(grade, field, None)
                if not isinstance(value, bool):
                    raise ConfigError(f"{where} returned {grade!r}: its {field} is {value!r}, not a bool")
            if completion and not grade.correct:
                raise ConfigError(f"{where} is wrong ({'; '.join(map(str, getattr(grade, 'reasons', ())))}): a "
                                  "reference response must grade right")


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


def jsonl_rows(path: Path, holds: str) -> Iterator[tuple[str, Any]]:
    """("<path>:<line>", its JSON) per non-empty line, decoded a line at a time: RecordError names a bad line."""
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            where = f"{path}:{number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise RecordError(f"{where}: not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                                  f"{holds} holds one UTF-8 JSON record a line") from None
            if line.strip():
                try:
                    yield where, json.loads(line)
                except json.JSONDecodeError as exc:
                    raise RecordError(f"{where}: malformed JSON ({exc.msg} at column {exc.colno})") from exc


__all__ = ["BUILT_IN", "Task", "build_task", "check_records", "check_reward_functions", "check_task", "jsonl_rows",
           "task_class"]
