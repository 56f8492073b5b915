"""GSM8K as a task: sources (``hub``; ``local``: a folder of train.jsonl and test.jsonl in the published format;
``sample``: the offline one in ./data), levels by solution steps (a one-step solution is left out), train
decontaminated against test, each level in a seeded shuffle (``n=5`` is the first five of ``n=10``)."""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.checks import ConfigError
from curriculum.tasks import jsonl_rows
from curriculum.tasks.base import (
    ALL,
    AnswerGrade,
    RecordError,
    RewardFunc,
    RewardSettings,
    Task,
    TaskRecord,
    TaskReport,
    check_split,
    disjoint,
)
from curriculum.tasks.gsm8k.grader import grade, reference_answer
from curriculum.tasks.gsm8k.rewards import GIST_FORMAT_FUNCTIONS, REWARD_FUNCTIONS, VERBATIM_FUNCTIONS

log = logging.getLogger(__name__)

SOURCES = ("hub", "local", "sample")
LEVELS = ("2steps", "3steps", "4steps", "5steps", "6+steps")
SAMPLE_DIR = Path(__file__).resolve().parent / "data"
CALCULATOR = re.compile(r"<<[^<>]*>>")  # GSM8K's calculator annotations in a solution step: "48/2 = <<48/2=24>>24"


def solution_level(solution: str) -> str | None:
    """The level of a reference solution by its steps, the non-empty lines before ``####`` (None below 2).

    >>> solution_level("Half of 48 is 24.\\n\\n24 + 48 = 72.\\n#### 72")
    '2steps'
    >>> [solution_level("step\\n" * steps + "#### 1") for steps in (1, 2, 5, 6, 9)]
    [None, '2steps', '5steps', '6+steps', '6+steps']
    """
    steps = sum(1 for line in solution.rpartition("####")[0].splitlines() if line.strip())
    if steps < 2:
        return None
    return "6+steps" if steps >= 6 else f"{steps}steps"


def gsm8k_record(raw, where: str, split: str, index: int) -> TaskRecord | None:
    """One published row as a TaskRecord (None below two steps); RecordError naming `where` for a malformed one."""
    if not isinstance(raw, Mapping):
        raise RecordError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    for name in ("question", "answer"):
        if not isinstance(raw.get(name), str) or not raw[name].strip():
            raise RecordError(f"{where}: field {name!r} must be a non-empty string")
    number = reference_answer(raw["answer"])
    if number is None:
        raise RecordError(f"{where}: field 'answer' must end with '#### <number>' (the published format)")
    level = solution_level(raw["answer"])
    if level is None:
        return None
    return TaskRecord(id=f"gsm8k-{split}-{index}", level=level, question=raw["question"].strip(),
                      # the number, canonical; and the text after #### as written (the recipe's reference)
                      columns={"answer": number.text, "answer_text": raw["answer"].split("####")[1].strip()},
                      source={"question": raw["question"], "answer": raw["answer"]})


def _jsonl_rows(path: Path) -> Iterator[tuple[str, Any]]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; source=local needs path= a folder with train.jsonl and "
                                'test.jsonl, one {"question": ..., "answer": "...\\n#### <number>"} a line')
    return jsonl_rows(path, "a GSM8K file")


def _hub_rows(hub_id: str, hub_config: str, split: str) -> Iterator[tuple[str, Any]]:
    try:
        import datasets

        rows = datasets.load_dataset(hub_id, hub_config, split=split)
    except Exception as exc:  # offline, unreachable, renamed: datasets raises many types
        raise ConnectionError(f"task.source=hub needs the Hugging Face hub to load {hub_id} ({hub_config}, {split}), "
                              f"and that failed ({type(exc).__name__}: {exc}). Offline, use task.source=sample, or "
                              "task.source=local with task.path= a folder of train.jsonl and test.jsonl.") from exc
    for index, row in enumerate(rows):
        yield f"{hub_id}/{hub_config}/{split}, row {index}", row


def worked_solution(solution: str, answer: str) -> str:
    """A reference solution in the recipe's tags: its steps (calculator annotations ``<<48/2=24>>`` dropped: the
    model never sees a calculator) in <reasoning>, the answer in <answer>.

    >>> print(worked_solution("Half of 48 is 48/2 = <<48/2=24>>24.\\n#### 24", "24"))
    <reasoning>
    Half of 48 is 48/2 = 24.
    </reasoning>
    <answer>
    24
    </answer>
    """
    body, _, _ = solution.rpartition("####")
    steps = [CALCULATOR.sub("", line).strip() for line in body.splitlines() if line.strip()]
    return "<reasoning>\n" + "\n".join(steps) + f"\n</reasoning>\n<answer>\n{answer}\n</answer>"


@dataclass(frozen=True)
class LoadedSplit:
    """A split's leveled records, with what loading left out (short solutions, test questions in train)."""

    records: list[TaskRecord]
    unleveled: int
    decontaminated: int = 0


class GSM8KTask(Task):
    """GSM8K: levels 2steps..6+steps, the recipe's grader and five rewards (module docstring)."""

    name = "gsm8k"
    has_all = True  # a stage's `level: all` trains on the whole split (the one-stage recipe)
    supervised = True  # every record has its worked solution (`sft_target`)
    columns = ("answer", "answer_text")
    levels = LEVELS
    report = TaskReport(format_reward="strict_format")

    def __init__(self, source: str = "hub", path: str | None = None, hub_id: str = "openai/gsm8k",
                 hub_config: str = "main"):
        if source not in SOURCES:
            raise ConfigError(f"task.source: {source!r} is not one of {', '.join(SOURCES)}")
        if source == "local" and not path:
            raise ConfigError("task.path: source=local needs a folder with train.jsonl and test.jsonl")
        self.source, self.hub_id, self.hub_config = source, hub_id, hub_config
        self.path = SAMPLE_DIR if source == "sample" else (Path(path) if path else None)
        self._splits: dict[str, LoadedSplit] = {}

    def _read(self, split: str) -> tuple[list[TaskRecord], int]:
        if self.source == "hub":
            rows = _hub_rows(self.hub_id, self.hub_config, split)
        else:
            rows = _jsonl_rows(self.path / f"{split}.jsonl")
        read = [gsm8k_record(raw, where, split, index) for index, (where, raw) in enumerate(rows)]
        if not read:
            raise RecordError(f"{self.source} {split} split: no records")
        records = [record for record in read if record is not None]
        return records, len(read) - len(records)

    def split(self, split: str) -> LoadedSplit:
        """Every leveled record of `split`, in source order; train decontaminated against all of test."""
        check_split(split)
        if split not in self._splits:
            records, unleveled = self._read(split)
            removed = 0
            if split == "train":
                records, removed = disjoint(records, self.split("test").records, self.content_key)
            self._splits[split] = LoadedSplit(records, unleveled, removed)
            contaminated = f"; {removed} decontaminated (their question is a test question)" if split == "train" else ""
            log.info("gsm8k %s split (%s): %d records in levels%s%s", split, self.source, len(records),
                     self.left_out(split), contaminated)
        return self._splits[split]

    def left_out(self, split: str) -> str:
        """The records of `split` below the first level (a one-step solution), which no level holds."""
        unleveled = self.split(split).unleveled
        return f"; {unleveled} of the {split} split left out below the first level, {LEVELS[0]} (a one-step " \
               "solution)" if unleveled else ""

    def records(self, level: str, split: str, *, n: int | None = None, seed: int = 0) -> list[TaskRecord]:
        """The first `n` records of `level` (ALL: every level) in `split` (None: all), in a shuffle seeded by `seed`.

        >>> task = GSM8KTask(source="sample")
        >>> [r.id for r in task.records("3steps", "test", n=3, seed=1)] == [
        ...     r.id for r in task.records("3steps", "test", n=5, seed=1)[:3]]
        True
        """
        if level != ALL:
            self.check_level(level)
        if n is not None and n < 0:
            raise ValueError(f"n must be None or non-negative, got {n}")
        pool = [record for record in self.split(split).records if level in (ALL, record.level)]
        random.Random(f"gsm8k:{split}:{seed}").shuffle(pool)
        return pool if n is None else pool[:n]

    def grade(self, completion, columns: Mapping[str, Any]) -> AnswerGrade:
        return grade(completion, columns["answer"])

    def reward_functions(self, settings: RewardSettings) -> dict[str, RewardFunc]:
        """The recipe's five rewards in all three readings (`rewards.py`); none reads the run's settings."""
        return {**REWARD_FUNCTIONS, **VERBATIM_FUNCTIONS, **GIST_FORMAT_FUNCTIONS}

    def sft_target(self, record: TaskRecord, fmt: str) -> str:
        """The worked solution and its ``####`` answer in the recipe's tags (`worked_solution`)."""
        if fmt != "reasoning_answer":
            raise ConfigError(f"prompt.fmt: {fmt}: GSM8K's worked solutions are written in the recipe's "
                              "<reasoning>/<answer> tags (reasoning_answer: prompt=gsm8k_reasoning)")
        return worked_solution(record.source["answer"], record.columns["answer"])
