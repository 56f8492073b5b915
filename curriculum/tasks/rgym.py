"""reasoning-gym datasets as tasks (``task=reasoning_gym task.dataset=<name>``, the ``rgym`` extra), offline.

Levels are the dataset's settings, named by ``levels: {key: settings}``, else one per reasoning-gym global
curriculum level ("level0".., "default" without one); ``settings`` apply to every level, a level's own winning.
Test draws from ``seed + 2**31`` (reasoning-gym seeds entry ``i`` with ``seed + i``). The dataset's scorer scores
the last closed ``<answer>`` block; the entry travels as JSON, so a scorer that judges that copy otherwise is refused.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import signal
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from core.checks import ConfigError
from curriculum.tasks.base import (
    ALL,
    AnswerGrade,
    RewardFunc,
    RewardSettings,
    Task,
    TaskRecord,
    TaskReport,
    check_level_key,
    check_split,
    completion_text,
    distinct,
    final_answer_block,
)

TEST_SEED_OFFSET = 2**31
# The version the `rgym` extra pins (pyproject.toml), for a user who installed the package without it.
PINNED = "reasoning-gym==0.1.25"


def _reasoning_gym():
    try:
        import reasoning_gym
        import reasoning_gym.factory
    except ImportError as exc:  # a ConfigError: refused in one line, not a traceback
        raise ConfigError(f"task: task=reasoning_gym needs reasoning-gym, an optional extra that is not importable "
                          f"here ({exc}): pip install -e '.[rgym]' (or pip install {PINNED})") from None
    return reasoning_gym


def curriculum_levels(dataset: str) -> dict[str, dict[str, Any]]:
    """"level<k>" -> the dataset's settings at reasoning-gym global curriculum level k ("default" without one)."""
    factory = _reasoning_gym().factory
    if not factory.has_curriculum(dataset):
        return {"default": {}}
    curriculum = factory.create_curriculum(dataset)
    top = max(len(attribute.levels) for attribute in curriculum.attributes.values()) - 1
    levels = {}
    for k in range(top + 1):
        curriculum.set_global_level(k)
        config = curriculum.generate_configuration({"seed": 0, "size": 1})
        levels[f"level{k}"] = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
                               if f.name not in ("seed", "size")}
    return levels


def check_shared_settings(settings: Mapping[str, Any], levels: Mapping[str, Mapping | None]) -> None:
    """Refuse a shared setting (`task.settings`) that every level sets itself: it would never be used.

    >>> check_shared_settings({"depth_constraint": 2}, {"a": {"n_people": 2}})  # used by every level
    >>> check_shared_settings({"n_people": 9}, {"a": {"n_people": 2}, "b": {}})  # used by b
    """
    for name, value in settings.items():
        own = {level: dict(values)[name] for level, values in levels.items() if values and name in values}
        if len(own) == len(levels):
            said = ", ".join(f"{level}: {setting!r}" for level, setting in own.items())
            raise ConfigError(f"task.settings.{name}: {value!r} is never used: every level sets its own ({said}); "
                              "set it in task.levels, one value a level")


# A level's first record: reasoning-gym's knights_knaves makes one of 12 people in ~2 s and one of 20 in ~60 s
# (its solver tries every assignment); one it cannot make in this long would hold a run's pools up for hours.
FIRST_RECORD_SECONDS = 30


@contextmanager
def first_record_limit(message: str, seconds: float) -> Iterator[None]:
    """End what runs inside with ConfigError(`message`) after `seconds` (an alarm: unlimited off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum, frame):
        raise ConfigError(message)

    before = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def format_ok(text: str) -> bool:
    """One ``<answer>`` block, closed, with only whitespace after it.

    >>> format_ok("I think 4.\\n<answer>4</answer>\\n"), format_ok("<answer>4</answer> or <answer>5</answer>")
    (True, False)
    """
    opened, closed = text.find("<answer>"), text.find("</answer>")
    return (text.count("<answer>") == 1 and text.count("</answer>") == 1 and opened < closed
            and not text[closed + len("</answer>"):].strip())


class ReasoningGymTask(Task):
    """One reasoning-gym dataset, its levels from `levels` or its curriculum (module docstring)."""

    name = "reasoning_gym"
    report = TaskReport(format_reward="format")
    columns = ("answer", "entry")
    has_all = True  # `level: all`: every level in turn (a one-stage run over the dataset's difficulties)

    @classmethod
    def check_installed(cls) -> None:
        _reasoning_gym()

    def __init__(self, dataset: str, levels: Mapping[str, Mapping] | None = None,
                 settings: Mapping[str, Any] | None = None):
        factory = _reasoning_gym().factory
        if dataset not in factory.DATASETS or dataset == "composite":
            known = ", ".join(sorted(name for name in factory.DATASETS if name != "composite"))
            raise ConfigError(f"task.dataset: {dataset!r} is not a reasoning-gym dataset; known: {known}")
        self.dataset = dataset
        chosen = curriculum_levels(dataset) if levels is None else levels
        if not isinstance(chosen, Mapping) or not chosen:
            raise ConfigError(f"task.levels: must be a non-empty mapping of level -> settings (got {levels!r})")
        for key, value in chosen.items():
            if value is not None and not isinstance(value, Mapping):
                raise ConfigError(f"task.levels.{key}: {value!r} is not a mapping of {dataset}'s settings (such as "
                                  "{n_people: 3}); a level is named by its settings")
        base = dict(settings or {})
        check_shared_settings(base, chosen)
        self.level_settings = {check_level_key(key, "task.levels"): {**base, **dict(value or {})}
                               for key, value in chosen.items()}
        self._score = factory.get_score_answer_fn(dataset)
        for key in self.level_settings:  # reasoning-gym checks each config (and the JSON copy) now, not mid-run
            with first_record_limit(f"task.levels.{key}: reasoning-gym made no {dataset} record in "
                                    f"{FIRST_RECORD_SECONDS} s with {self.level_settings[key]} (a level it cannot "
                                    "generate, or one whose pools would take hours); lower its settings",
                                    FIRST_RECORD_SECONDS):
                self.records(key, "train", n=1)

    @property
    def levels(self) -> tuple[str, ...]:
        return tuple(self.level_settings)

    def _dataset(self, level: str, *, seed: int, size: int | None):
        merged = self.level_settings[level]
        sized = {} if size is None else {"size": size}
        try:
            return _reasoning_gym().create_dataset(self.dataset, seed=seed, **sized, **merged)
        except (TypeError, ValueError, AssertionError) as exc:
            raise ConfigError(f"task.levels.{level}: reasoning-gym refused {self.dataset} with {merged} "
                              f"({type(exc).__name__}: {exc})") from exc

    def records(self, level: str, split: str, *, n: int | None = None, seed: int = 0) -> list[TaskRecord]:
        """The distinct entries among the first `n` of the level's dataset (None: its default size); ALL: every
        level in turn, `n` shared out evenly (the earlier levels take the remainder).

        >>> task = ReasoningGymTask("knights_knaves")
        >>> [r.level for r in task.records(ALL, "train", n=5)]
        ['level0', 'level1', 'level2', 'level3', 'level0']
        """
        if level == ALL:
            return self._every_level(split, n=n, seed=seed)
        self.check_level(level)
        base = seed + (TEST_SEED_OFFSET if check_split(split) == "test" else 0)
        entries = enumerate(self._dataset(level, seed=base, size=n))
        return distinct((self._record(level, split, index, entry) for index, entry in entries), self.content_key)

    def _every_level(self, split: str, *, n: int | None, seed: int) -> list[TaskRecord]:
        k = len(self.levels)
        shares = [None if n is None else n // k + (i < n % k) for i in range(k)]
        per_level = [self.records(level, split, n=share, seed=seed) for level, share in zip(self.levels, shares,
                                                                                             strict=True)]
        # interleaved, so the first n of a pool mix the levels
        mixed = (record for row in itertools.zip_longest(*per_level) for record in row if record is not None)
        return distinct(mixed, self.content_key)

    def _record(self, level: str, split: str, index: int, entry: Mapping) -> TaskRecord:
        try:
            carried = json.dumps(entry)
        except TypeError as exc:
            raise ConfigError(f"task.dataset: {self.dataset} entry {index} does not serialise to JSON ({exc}); "
                              "its reference cannot travel in a dataset row") from exc
        answer = entry.get("answer")
        oracle = None if answer is None else str(answer)
        if self._safe_score(oracle, entry) != self._safe_score(oracle, json.loads(carried)):
            raise ConfigError(f"task.dataset: {self.dataset}'s score_answer grades its own answer differently on the "
                              "JSON copy of an entry (it compares tuples or objects); this dataset is not supported")
        return TaskRecord(id=f"{level}-{split}-{index}", level=level, question=str(entry["question"]),
                          columns={"answer": oracle or "", "entry": carried}, source=dict(entry))

    def _safe_score(self, answer: str | None, entry: Mapping) -> float:
        try:
            return float(self._score(answer, entry))
        except Exception:  # a scorer that raises on a model's text must not stop training
            return 0.0

    def grade(self, completion, columns: Mapping[str, Any]) -> AnswerGrade:
        text = completion_text(completion)
        formatted = format_ok(text)
        reasons = [] if formatted else ["format: want one <answer>...</answer> block, last"]
        block = final_answer_block(text)
        if block is None:
            return AnswerGrade(False, formatted, False, None, 0.0, (*reasons, "no <answer> block"))
        answer = block.strip()
        score = self._safe_score(answer, json.loads(columns["entry"]))
        if score < 1.0:
            reasons.append(f"score_answer gave {score:g}")
        return AnswerGrade(score >= 1.0, formatted, True, answer, score, tuple(reasons))

    def reward_functions(self, settings: RewardSettings) -> dict[str, RewardFunc]:
        """answer: reasoning-gym's score of the final answer block; format: 1 for one answer block, last."""
        return {"answer": self.answer_reward, "format": self.format_reward}

    def answer_reward(self, completions, entry, **kwargs) -> list[float]:
        return [self.grade(c, {"entry": e}).score for c, e in zip(completions, entry, strict=True)]

    def format_reward(self, completions, **kwargs) -> list[float]:
        return [float(format_ok(completion_text(c))) for c in completions]
