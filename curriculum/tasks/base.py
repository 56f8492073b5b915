"""The task interface (`Task`): what the runner, validation and report need from a task, its records, and how its
validation is shown (`TaskReport`, recorded in run.json: a run folder's report reads plain data, never the task's
code). Nothing outside a task branches on its name."""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from core.checks import ConfigError, is_int, is_number
from curriculum.prompts import render_prompt

SPLITS = ("train", "test")
#: A stage's `level: all`: the task's whole training split, every level in its natural share (tasks with `has_all`).
ALL = "all"
#: A level key is a stage name and a file name (`samples/<stage>/<level>.jsonl`): no '/', no spaces.
LEVEL_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
#: Row keys every task's rows carry besides its columns; a column must not take one of these names.
ROW_KEYS = ("prompt", "completion", "id", "level")
#: A reward function in TRL's form; settings bound by `functools.partial` of a module-level function (it pickles)
RewardFunc = Callable[..., list[float]]


@dataclass(frozen=True)
class Rate:
    """A share of completions (0..1) a task adds to its validation rows, and where it is shown."""

    key: str  # the validation row's column
    name: str  # what the console's caption calls it ("lenient")
    title: str | None = None  # the report's section heading (None: not in the report)
    header: str | None = None  # the console's column header, a line break allowed (None: not in the console)
    caption: str = ""  # what the console's caption says of it ("of those with reasoning")
    counted: tuple[str, ...] = ()  # the row columns counting its whole, the first present one (none: every completion)
    beside_accuracy: bool = False  # another reading of accuracy: shown next to it, left out where equal to it
    note: str = ""  # what the report says under its table


@dataclass(frozen=True)
class TaskReport:
    """What the report, console and tracker say of a task's validation (what it leaves out is absent, not empty)."""

    record: str = "problem"  # what one record is called ("puzzle")
    distinct: str = "distinct problems"  # what a validation pool's n counts
    pool_note: str = ""  # why a pool holds no repeats, said beside the intervals ("up to renaming the people")
    accuracy: str = "answer right"  # what a right completion is, on the accuracy axis
    level_column: str = "level"  # the row column the console names a subset by (K&K: its people count)
    rates: tuple[Rate, ...] = ()
    # (label, sample key): the first sample whose key is true, shown beside the first right and wrong, the longest...
    picks: tuple[tuple[str, str], ...] = ()
    facts: tuple[tuple[str, str], ...] = ()  # (label, sample key): shown with each sample where present
    sample_columns: tuple[str, ...] = ()  # the tracker's sample table, beside every task's columns
    format_reward: str | None = None  # the reward component that is the format rate (its key: `rewards/<key>/mean`)
    chance: Mapping[str, float] = field(default_factory=dict)  # level -> accuracy of a blind guess
    chance_note: str = ""  # how chance is reckoned, under the accuracy plot
    # the console's word before a level's label in a stage banner ("level 2steps"; K&K's "2ppl" needs none)
    level_word: str = "level"

    def as_json(self) -> dict:
        """The record run.json keeps.

        >>> TaskReport.from_json(TaskReport(record="puzzle", rates=(Rate("x", "x"),)).as_json()).rates[0].key
        'x'
        """
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data) -> TaskReport | None:
        """The record run.json holds, or None (written by anyone: a field of another type is left at its default).

        >>> TaskReport.from_json({"record": "puzzle", "chance": {"2ppl": 0.25, "x": "?"}, "rates": "?"})
        TaskReport(record='puzzle', distinct='distinct problems', pool_note='', accuracy='answer right', \
level_column='level', rates=(), picks=(), facts=(), sample_columns=(), format_reward=None, \
chance={'2ppl': 0.25}, chance_note='', level_word='level')
        >>> TaskReport.from_json(["not", "a", "mapping"]) is None
        True
        """
        if not isinstance(data, Mapping):
            return None
        texts = {f.name: data[f.name] for f in dataclasses.fields(cls)
                 if f.type in ("str", "str | None") and isinstance(data.get(f.name), str)}
        chance = data.get("chance") if isinstance(data.get("chance"), Mapping) else {}
        return cls(**texts, rates=tuple(_rates(data.get("rates"))), picks=_pairs(data.get("picks")),
                   facts=_pairs(data.get("facts")), sample_columns=_strings(data.get("sample_columns")),
                   chance={str(k): float(v) for k, v in chance.items() if is_number(v, finite=True)})


def _strings(value) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list | tuple) else ()


def _pairs(value) -> tuple[tuple[str, str], ...]:
    pairs = (_strings(item) for item in (value if isinstance(value, list | tuple) else ()))
    return tuple(pair for pair in pairs if len(pair) == 2)


def _rates(value):
    for item in value if isinstance(value, list | tuple) else ():
        if isinstance(item, Mapping) and isinstance(item.get("key"), str) and isinstance(item.get("name"), str):
            texts = {f.name: item[f.name] for f in dataclasses.fields(Rate)
                     if f.name not in ("counted", "beside_accuracy") and isinstance(item.get(f.name), str)}
            yield Rate(**texts, counted=_strings(item.get("counted")),
                       beside_accuracy=item.get("beside_accuracy") is True)


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
    """One problem of a task."""

    id: str  # unique and stable within a split ("2ppl-17")
    level: str
    question: str  # the text a prompt puts where it says ``{quiz}``
    columns: dict[str, Any]  # the reference the grader and rewards read
    source: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # the source's own record

    def __post_init__(self):
        for name, value in self.columns.items():
            if name in ROW_KEYS:
                raise ValueError(f"record {self.id}: column {name!r} would overwrite the row's own {name!r}")
            if isinstance(value, Mapping):
                raise ValueError(f"record {self.id}: column {name!r} is a mapping; datasets would union its keys "
                                 "across rows (store it as lists or as a JSON string)")


@runtime_checkable
class Grade(Protocol):
    """The verdict on one completion, as validation and the report read it (K&K's has more)."""

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
    """A :class:`Grade` of a one-value answer: `answer` as read (None: nothing), `score` in [0, 1] (1.0 when right)."""

    correct: bool
    format_ok: bool
    answered: bool
    answer: str | None
    score: float
    reasons: tuple[str, ...]


def completion_text(completion) -> str:
    """The text of a completion: a str, or TRL's conversational `[{"role": "assistant", ...}]`; a think block TRL
    split off into `reasoning_content` (or `thinking`) put back in <think> tags, so the format check sees it all.

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
    """A question as decontamination compares it: NFKC, case-folded, each run of non-alphanumerics one space.

    >>> normalized_question("Tom has  3 apples.\\nHow many?") == normalized_question("tom has 3 APPLES, how many")
    True
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join("".join(ch if ch.isalnum() else " " for ch in folded).split())


def disjoint(train: Iterable[TaskRecord], held_out: Iterable[TaskRecord], key: Callable[[TaskRecord], Hashable],
             limit: int | None = None) -> tuple[list[TaskRecord], int]:
    """The training records whose `key` no held-out record shares, in order, and how many were dropped; `train`
    is read no further than `limit` kept.

    >>> rec, by_question = lambda i, q: TaskRecord(f"r{i}", "x", q, {}), lambda r: normalized_question(r.question)
    >>> kept, dropped = disjoint([rec(1, "A b?"), rec(2, "c")], [rec(3, "a B")], by_question)
    >>> [r.id for r in kept], dropped
    (['r2'], 1)
    >>> rest = iter([rec(1, "a b"), rec(2, "c"), rec(3, "d"), rec(4, "a b")])
    >>> [r.id for r in disjoint(rest, [rec(5, "A B")], by_question, limit=1)[0]], [r.id for r in rest]
    (['r2'], ['r4'])
    """
    seen = {key(record) for record in held_out}
    kept: list[TaskRecord] = []
    dropped = 0
    for record in train:
        if limit is not None and len(kept) >= limit:
            break
        if key(record) in seen:
            dropped += 1
        else:
            kept.append(record)
    return kept, dropped


def distinct(records: Iterable[TaskRecord], key: Callable[[TaskRecord], Hashable]) -> list[TaskRecord]:
    """The first record of each `key`, in order.

    >>> [r.id for r in distinct([TaskRecord(f"r{i}", "x", q, {}) for i, q in enumerate("aba")], lambda r: r.question)]
    ['r0', 'r1']
    """
    first: dict[Hashable, TaskRecord] = {}
    for record in records:
        first.setdefault(key(record), record)
    return list(first.values())


def check_level_key(level, key: str) -> str:
    """`level` when it is a usable level key; ConfigError naming `key` otherwise."""
    if not isinstance(level, str) or not LEVEL_KEY.fullmatch(level):
        raise ConfigError(f"{key}: {level!r} is not a level key (letters, digits and _ . + -, no '/' or spaces: "
                          "it names a stage, a folder and a config key)")
    return level


class Task(ABC):
    """A task: levels, records, prompts, grades, rewards (defaults: one answer a question; `fmt` if it grades by it)."""

    name: str = ""
    #: how the report, the console and the tracker show its validation (run.json records it)
    report: TaskReport = TaskReport()
    #: reward components that run even at weight 0, so their mean is logged (K&K's answer: accuracy)
    always_rewarded: tuple[str, ...] = ()
    formats: tuple[str, ...] = ()  # the answer formats (`prompt.fmt`) its grader reads; empty: it reads any
    supervised: bool = False  # whether `sft_target` gives a reference response for every record (`kind: sft` needs it)
    #: the validation row columns it adds (`subset_metrics`' keys), beside every task's
    metric_columns: tuple[str, ...] = ()
    #: the reference columns of its records (`TaskRecord.columns`): TRL hands them to every reward function
    columns: tuple[str, ...] = ("answer",)
    #: weight per component under `reward.weights` (whose entries win) for a task brought by import path (reward=task)
    default_weights: Mapping[str, float] = MappingProxyType({})
    has_all: bool = False  # whether `records` takes `ALL` (the whole split) as a training stage's level

    @classmethod
    def check_installed(cls) -> None:
        """ConfigError naming what to install where the task needs an optional package this environment lacks."""
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
        """Component name -> reward function, built with the run's `settings` (bound ones win over dataset columns)."""

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
        """The completion a supervised stage trains on for `record`, in answer format `fmt`; it grades right."""
        raise NotImplementedError(f"task {self.name} has no reference responses (supervised: false)")

    def level_columns(self, level: str) -> dict[str, Any]:
        """Columns a validation row about `level` carries beside `level` itself (K&K: its people count)."""
        return {}

    def sample_fields(self, record: TaskRecord, text: str, grade: Grade) -> dict[str, Any]:
        """What a graded sample holds beside every task's fields: by default the answer read and the reference."""
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
        """The prompt of `record` (chat messages, or plain text for a base model) for GRPO, SFT and validation alike."""
        return render_prompt(record.question, prompt_cfg, chat=chat)

    def check_level(self, level, key: str = "level") -> str:
        """`level` when this task has it; ConfigError naming `key` and the levels otherwise."""
        if level not in self.levels:
            raise ConfigError(f"{key}: {level!r} is not a level of task {self.name}; levels: {', '.join(self.levels)}")
        return level

    def level_of(self, value, key: str) -> str:
        """The level a config names by `value`: its key, or a number for the one level starting with it (2: "2ppl")."""
        if is_int(value):
            found = [level for level in self.levels if re.match(rf"{value}(?!\d)", level)]
            if len(found) == 1:
                return found[0]
        return self.check_level(value, key)

    def validation_records(self, level: str, n: int, seed: int) -> list[TaskRecord]:
        """The held-out records of one subset, the same for every run: the distinct problems (`content_key`) among
        the first `n` test records (a repeat would count one problem twice in the accuracy)."""
        records = self.records(level, "test", n=n, seed=seed)
        if len(records) < n:
            raise ConfigError(f"eval.n: {n} validation {self.report.record}s asked at {level}, but task {self.name} "
                              f"has only {len(records)} there{self.left_out('test')}; lower eval.n")
        return distinct(records, self.content_key)

    def training_records(self, level: str, want: int, held_out: Sequence[TaskRecord], *, seed: int,
                         spare: int) -> tuple[list[TaskRecord], int]:
        """Up to `want` training records of `level` not `held_out`, and how many were dropped (`spare` more asked)."""
        pool = self.records(level, "train", n=want + (spare if held_out else 0), seed=seed)
        kept, dropped = disjoint(pool, held_out, self.content_key)
        return kept[:want], dropped


def check_split(split: str) -> str:
    """`split` when it is "train" or "test"; ValueError otherwise."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return split
