"""The task interface: what the runner, validation and report need from a task, and nothing else.

A task (K&K, GSM8K, a reasoning-gym dataset) names its **levels**, easiest first: the stage keys of
a curriculum and the validation subsets ("2ppl".."8ppl", "2steps".."6+steps"). Per level and
split it gives **records** (:class:`TaskRecord`), loaded or generated from its sources,
deterministic by seed, train disjoint from test. It **renders** a record's prompt from a prompt
config (conf/prompt/*.yaml), **grades** a completion against a record's reference columns (a
:class:`Grade`: right, formatted, reasons) and offers **reward functions** in TRL's form: pure,
batched, ``f(completions, **columns) -> list[float]``, named by component; the weights over them are
the reward group's (conf/reward/*.yaml, a task's own `default_weights` under them). A task with
reference solutions gives **supervised targets** in its prompt's format (`kind: sft`). Validation asks
it for the **columns** of its rows and samples beyond every task's (K&K: its people count, reasoning
agreement, invented names), and the report, the console and the tracker show what its
:class:`~curriculum.tasks.report.TaskReport` says; nothing outside a task branches on its name.

A task comes from a config: `task._target_` (its import path, a user's own module included) or a
built-in's `task.name` (`curriculum.tasks.build_task`).

Columns are the reference a grader reads (K&K: names, solution; GSM8K: answer). They become dataset
columns that TRL hands to every reward function, so no column may hold a dict: `datasets` would
union a dict column's keys across rows (every name in every row, as None).
"""

from __future__ import annotations

import re
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from core.checks import ConfigError, is_int
from curriculum.prompts import render_prompt
from curriculum.tasks.report import TaskReport

SPLITS = ("train", "test")
#: A stage's `level: all`: the task's whole training split, every level in its natural share (tasks with `has_all`).
ALL = "all"
#: A level key is a stage name and a file name (`samples/<stage>/<level>.jsonl`): no '/', no spaces.
LEVEL_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
#: Row keys every task's rows carry besides its columns; a column must not take one of these names.
ROW_KEYS = ("prompt", "completion", "id", "level")
#: A reward function in TRL's form: pure, batched, ``f(completions, **columns) -> list[float]``; a task binds its
#: settings with `functools.partial` of a module-level function (it pickles, unlike a closure).
RewardFunc = Callable[..., list[float]]


@dataclass(frozen=True)
class RewardSettings:
    """What a task's reward functions are built with, from a run's config."""

    fmt: str  # `prompt.fmt`: the answer format the prompt asks for (the grader reads it)
    max_completion_length: int  # `grpo.max_completion_length`: a length-aware reward's limit
    options: Mapping[str, Any] = field(default_factory=dict)  # the reward group's blocks for the task (K&K: overlong)


class RecordError(ValueError):
    """Malformed record data in a task's source; the message starts with the file and line, row or column."""


@dataclass(frozen=True)
class TaskRecord:
    """One problem of a task, in the form the runner, validation and report read.

    id: unique and stable within a task's split ("2ppl-17", "gsm8k-test-41").
    level: the level key the record belongs to.
    question: the text a prompt template puts where it says ``{quiz}``.
    columns: the reference a grader and the rewards read (TRL passes them as keyword arguments).
    source: the source's own record (K&K's published fields), for task-specific consumers (SFT).
    """

    id: str
    level: str
    question: str
    columns: dict[str, Any]
    source: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        for name, value in self.columns.items():
            if name in ROW_KEYS:
                raise ValueError(f"record {self.id}: column {name!r} would overwrite the row's own {name!r}")
            if isinstance(value, Mapping):
                raise ValueError(f"record {self.id}: column {name!r} is a mapping; datasets would union its keys "
                                 "across rows (store it as lists or as a JSON string)")


@runtime_checkable
class Grade(Protocol):
    """The verdict on one completion, as validation and the report read it.

    `curriculum.tasks.kk.grading.grader.Grade` (K&K) has these four and more (assignment, n_right, ...);
    :class:`AnswerGrade` has them for tasks whose answer is one value.
    """

    @property
    def correct(self) -> bool: ...  # the answer is right (format not required)

    @property
    def format_ok(self) -> bool: ...  # the prompt's output format was followed

    @property
    def answered(self) -> bool: ...  # an answer block was found

    @property
    def reasons(self) -> tuple[str, ...]: ...  # why anything is not right or not formatted


@dataclass(frozen=True)
class AnswerGrade:
    """A :class:`Grade` for a task whose answer is one value (a number, a string).

    answer: what was read from the final answer block (normalised by the task), None if nothing.
    score: the task's answer score in [0, 1]: 1.0 when right; partial credit where the task gives it.
    """

    correct: bool
    format_ok: bool
    answered: bool
    answer: str | None
    score: float
    reasons: tuple[str, ...]


def completion_text(completion) -> str:
    """The text of a completion: a str, or TRL's conversational `[{"role": "assistant", ...}]`.

    A message whose think block TRL's `parse_response` split off into `reasoning_content` (or
    `thinking`) gets it back inside <think> tags, so the format check sees what the model wrote.

    >>> completion_text([{"role": "assistant", "content": "<answer>x</answer>"}])
    '<answer>x</answer>'
    >>> completion_text([{"role": "assistant", "reasoning_content": "hm", "content": "<answer>x</answer>"}])
    '<think>\\nhm\\n</think>\\n<answer>x</answer>'
    """
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    parts = []
    for message in completion:
        if not isinstance(message, dict):
            parts.append(str(message))
            continue
        thinking = message.get("reasoning_content") or message.get("thinking")
        if thinking:
            parts.append(f"<think>\n{thinking}\n</think>\n")
        content = message.get("content")
        if isinstance(content, list):  # multimodal parts: [{"type": "text", "text": ...}]
            content = "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
        parts.append("" if content is None else str(content))
    return "".join(parts)


def task_row(record: TaskRecord, prompt: str) -> dict[str, Any]:
    """The dataset row TRL trains on: the rendered prompt text, the record's id and level, its columns.

    >>> task_row(TaskRecord("gsm8k-train-3", "2steps", "Q?", {"answer": "5"}), "<prompt>")
    {'prompt': '<prompt>', 'id': 'gsm8k-train-3', 'level': '2steps', 'answer': '5'}
    """
    return {"prompt": prompt, "id": record.id, "level": record.level, **record.columns}


def final_answer_block(text: str, tag: str = "answer") -> str | None:
    """The text inside the last closed ``<tag>...</tag>`` block, None when there is none (two scans, no regex).

    >>> final_answer_block("<answer>1</answer> then <answer>2</answer>"), final_answer_block("<answer>3")
    ('2', None)
    """
    close = text.rfind(f"</{tag}>")
    if close < 0:
        return None
    opened = text.rfind(f"<{tag}>", 0, close)
    return None if opened < 0 else text[opened + len(tag) + 2:close]


def normalized_question(text: str) -> str:
    """A question reduced to what decontamination compares: compatible Unicode, case-folded, every run
    of non-alphanumerics one space.

    >>> normalized_question("Tom has  3 apples.\\nHow many?") == normalized_question("tom has 3 APPLES, how many")
    True
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join("".join(ch if ch.isalnum() else " " for ch in folded).split())


def disjoint(train: Sequence[TaskRecord], held_out: Sequence[TaskRecord],
             key: Callable[[TaskRecord], Hashable]) -> tuple[list[TaskRecord], int]:
    """The training records whose `key` no held-out record shares, in order, and how many were dropped.

    >>> rec, by_question = lambda i, q: TaskRecord(f"r{i}", "x", q, {}), lambda r: normalized_question(r.question)
    >>> kept, dropped = disjoint([rec(1, "A b?"), rec(2, "c")], [rec(3, "a B")], by_question)
    >>> [r.id for r in kept], dropped
    (['r2'], 1)
    """
    seen = {key(record) for record in held_out}
    kept = [record for record in train if key(record) not in seen]
    return kept, len(train) - len(kept)


def check_level_key(level, key: str) -> str:
    """`level` when it is a usable level key; ConfigError naming `key` otherwise.

    >>> check_level_key("6+steps", "task.levels")
    '6+steps'
    """
    if not isinstance(level, str) or not LEVEL_KEY.fullmatch(level):
        raise ConfigError(f"{key}: {level!r} is not a level key (letters, digits and _ . + -, no '/' or spaces)")
    return level


class Task(ABC):
    """A task: levels, records per level and split, prompts, grades and reward functions.

    Subclasses set `name` and implement the abstract members; the rest have defaults that fit a task
    whose record is a question with one answer (override `content_key` when two differently worded
    records can be the same problem, as K&K's renamed puzzles are). A task whose grading depends on
    the prompt's answer format takes `fmt` in its constructor: `build_task` hands it `prompt.fmt`.
    """

    name: str = ""
    #: how the report, the console and the tracker show its validation (run.json records it)
    report: TaskReport = TaskReport()
    #: reward components that run even at weight 0, so their mean is logged (K&K's answer: accuracy)
    always_rewarded: tuple[str, ...] = ()
    #: the answer formats (`prompt.fmt`) its grader reads; empty: it reads any
    formats: tuple[str, ...] = ()
    #: whether `sft_target` gives a reference response for every record (`kind: sft` needs it)
    supervised: bool = False
    #: the validation row columns it adds (`subset_metrics`' keys), beside every task's
    metric_columns: tuple[str, ...] = ()
    #: the reference columns of its records (`TaskRecord.columns`): TRL hands them to every reward function
    columns: tuple[str, ...] = ("answer",)
    #: weight per component under `reward.weights` (whose entries win): what a task brought by import path runs
    #: (conf/task/custom.yaml picks reward=task). The built-in tasks declare none: their conf/reward/ files
    #: name every weight.
    default_weights: Mapping[str, float] = MappingProxyType({})

    @classmethod
    def check_installed(cls) -> None:
        """ConfigError naming what to install, where the task needs an optional package this environment lacks;
        asked as the task is built (curriculum.tasks.build_task), before any model loads. Every package this one
        needs is installed."""
        return None

    @property
    @abstractmethod
    def levels(self) -> tuple[str, ...]:
        """The level keys, easiest first."""

    @abstractmethod
    def records(self, level: str, split: str, *, n: int | None = None, seed: int = 0) -> list[TaskRecord]:
        """The first `n` records (None: all) of `level` in `split` ("train"/"test"), the same for the same seed."""

    @abstractmethod
    def grade(self, completion, columns: Mapping[str, Any]) -> Grade:
        """Grade one completion (a str or TRL's conversational form) against a record's columns."""

    @abstractmethod
    def reward_functions(self, settings: RewardSettings) -> dict[str, RewardFunc]:
        """Component name -> reward function, ``f(completions, **columns) -> list[float]``, built with the
        run's `settings` (its prompt format, its completion length, the reward group's blocks for the task).
        Settings bound with `functools.partial` win over same-named dataset columns in a run."""

    @property
    def validation_levels(self) -> tuple[str, ...]:
        """The levels validated when `eval.subsets` is null: every level."""
        return self.levels

    def check_format(self, fmt: str) -> None:
        """ConfigError naming prompt.fmt when the grader cannot read answers in format `fmt` (`formats`)."""
        if self.formats and fmt not in self.formats:
            raise ConfigError(f"prompt.fmt: {fmt} is not an answer format of task {self.name} "
                              f"({', '.join(self.formats)})")

    def sft_target(self, record: TaskRecord, fmt: str) -> str:
        """The completion a supervised stage trains on for `record`, in answer format `fmt` (tasks that are
        `supervised`); it must grade right and formatted."""
        raise NotImplementedError(f"task {self.name} has no reference responses (supervised: false)")

    def level_columns(self, level: str) -> dict[str, Any]:
        """Columns a validation row about `level` carries beside `level` itself (K&K: its people count)."""
        return {}

    def sample_fields(self, record: TaskRecord, text: str, grade: Grade) -> dict[str, Any]:
        """What a graded sample (`samples/<stage>/<level>.jsonl`) holds of one completion beside every task's
        fields (its grade, tokens, reasons): by default the answer read and the reference, as text."""
        answer = getattr(grade, "answer", None)
        return {"answer": None if answer is None else str(answer), "reference": record.columns.get("answer")}

    def subset_metrics(self, samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The `metric_columns` of one subset's validation row, from its graded samples."""
        return {}

    def left_out(self, split: str) -> str:
        """What loading `split` left out of every level, said where a level falls short ("" when nothing was)."""
        return ""

    def content_key(self, record: TaskRecord) -> Hashable:
        """What makes two records the same problem (decontamination compares these)."""
        return normalized_question(record.question)

    def render(self, record: TaskRecord, prompt_cfg: Mapping, *, chat: bool) -> list[dict[str, str]] | str:
        """The prompt of `record`: chat messages, or plain text for a base model (`chat` false); by default the
        prompt config's template around the question (`curriculum.prompts`). GRPO's rows, SFT's and validation's
        prompts are all this, made text by the tokenizer's chat template (`curriculum.data.task_prompt`)."""
        return render_prompt(record.question, prompt_cfg, chat=chat)

    #: whether `records` takes `ALL` (the whole split) as a training stage's level
    has_all: bool = False

    def check_level(self, level, key: str = "level") -> str:
        """`level` when this task has it; ConfigError naming `key` and the levels otherwise."""
        if level not in self.levels:
            raise ConfigError(f"{key}: {level!r} is not a level of task {self.name}; levels: {', '.join(self.levels)}")
        return level

    def level_of(self, value, key: str) -> str:
        """The level key a config names with `value` (a stage's level, a validation subset): the key itself,
        or a whole number for the one level that starts with it (2: "2steps", "2ppl"; so experiment=smoke's
        `eval.subsets: [2, 3]` names any task's first levels). ConfigError naming `key` otherwise."""
        if is_int(value):
            found = [level for level in self.levels if re.match(rf"{value}(?!\d)", level)]
            if len(found) == 1:
                return found[0]
        return self.check_level(value, key)

    def validation_records(self, level: str, n: int, seed: int) -> list[TaskRecord]:
        """The held-out records of one subset, the same for every run: of the first `n` test records, those
        that are distinct problems (`content_key`; a repeat would count one problem twice in the accuracy)."""
        records = self.records(level, "test", n=n, seed=seed)
        if len(records) < n:
            raise ConfigError(f"eval.n: {n} validation records asked at {level}, but task {self.name} has only "
                              f"{len(records)} there{self.left_out('test')}; lower eval.n")
        seen, distinct = set(), []
        for record in records:
            if self.content_key(record) not in seen:
                seen.add(self.content_key(record))
                distinct.append(record)
        return distinct

    def training_records(self, level: str, want: int, held_out: Sequence[TaskRecord], *, seed: int,
                         spare: int) -> tuple[list[TaskRecord], int]:
        """Up to `want` training records of `level` that no `held_out` record shares (`content_key`), and
        how many held-out overlaps were dropped; `spare` more are asked for so the drops still leave `want`."""
        pool = self.records(level, "train", n=want + (spare if held_out else 0), seed=seed)
        kept, dropped = disjoint(pool, held_out, self.content_key)
        return kept[:want], dropped


def check_split(split: str) -> str:
    """`split` when it is "train" or "test"; ValueError otherwise."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return split
