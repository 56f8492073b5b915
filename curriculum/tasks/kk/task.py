"""Knights and Knaves as a task: the project's own puzzles, behind the task interface.

Levels are "2ppl".."8ppl" (people per puzzle); records come from `sources.load_records` (generated,
hub or local, with its seeds), the prompt from the prompt config on the quiz, and a record's columns
are names, solution and its people count. Two puzzles are the same problem when their `canonical_key`
is (renamed or reordered people). Everything else K&K is lives here too: the grader at the prompt's
answer format (`grading/`), the reward components (`rewards.py`; presets: conf/reward/), the supervised
targets (`sft.py`: the published chain of thought), what its validation rows and samples add
(`metrics.py`) and how its report shows them (`report.py`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

from core.checks import ConfigError, is_int
from curriculum.tasks.base import RewardFunc, RewardSettings, Task, TaskRecord, check_split
from curriculum.tasks.kk import metrics
from curriculum.tasks.kk.canonical import canonical_key
from curriculum.tasks.kk.grading.grader import FORMATS, Grade, grade
from curriculum.tasks.kk.report import REPORT
from curriculum.tasks.kk.rewards import reward_components
from curriculum.tasks.kk.sft import reference_response
from curriculum.tasks.kk.sources import (
    HUB_ID,
    KNOWN_PPL,
    SOURCES,
    distinct_puzzles,
    iter_records,
    load_records,
    split_disjoint,
)

LEVELS = tuple(f"{ppl}ppl" for ppl in KNOWN_PPL)


def ppl_of_level(level: str) -> int:
    """3 for "3ppl".

    >>> ppl_of_level("3ppl")
    3
    """
    return int(level.removesuffix("ppl"))


def kk_record(record: Mapping) -> TaskRecord:
    """A published K&K record as a TaskRecord: id "<n>ppl-<index>", the quiz, names/solution/ppl columns."""
    ppl = len(record["names"])
    return TaskRecord(id=f"{ppl}ppl-{record['index']}", level=f"{ppl}ppl", question=record["quiz"],
                      columns={"names": list(record["names"]), "solution": [bool(x) for x in record["solution"]],
                               "ppl": ppl},
                      source=dict(record))


class KKTask(Task):
    """K&K puzzles of 2..8 people (module docstring), graded at answer format `fmt` (the prompt's)."""

    name = "kk"
    report = REPORT
    always_rewarded = ("answer",)  # accuracy is logged (rewards/answer/mean) whatever its weight
    formats = FORMATS
    supervised = True
    metric_columns = metrics.METRIC_COLUMNS
    columns = ("names", "solution", "ppl")

    def __init__(self, source: str = "generated", path: str | None = None, hub_id: str = HUB_ID,
                 fmt: str = "think_answer"):
        if source not in SOURCES:
            raise ConfigError(f"task.source: {source!r} is not one of {', '.join(SOURCES)}")
        # conf/task/kk.yaml takes its source from the data group, where a user sets it
        if source == "local" and (path is None or not Path(str(path)).is_dir()):
            raise ConfigError(f"data.path: {path!r} is not a folder (needed by data.source=local)")
        self.source, self.path, self.hub_id, self.fmt = source, path, hub_id, fmt

    @property
    def levels(self) -> tuple[str, ...]:
        return LEVELS

    @property
    def validation_levels(self) -> tuple[str, ...]:
        """2..7 people, as runs validated before tasks chose (8ppl only where eval.subsets names it)."""
        return LEVELS[:-1]

    def records(self, level: str, split: str, *, n: int | None = None, seed: int = 0) -> list[TaskRecord]:
        """`load_records` for the level's ppl, as TaskRecords.

        >>> [r.id for r in KKTask().records("3ppl", "test", n=2, seed=1)]
        ['3ppl-0', '3ppl-1']
        """
        self.check_level(level)
        loaded = load_records(self.source, ppl_of_level(level), check_split(split), n=n, seed=seed,
                              path=self.path, hub_id=self.hub_id)
        return [kk_record(record) for record in loaded]

    def content_key(self, record: TaskRecord) -> Hashable:
        return canonical_key(record.source)

    def level_of(self, value, key: str) -> str:
        """A people count (3, "3") or a level key ("3ppl") as the level key.

        >>> KKTask().level_of(3, "ppl"), KKTask().level_of("4ppl", "level")
        ('3ppl', '4ppl')
        """
        text = str(value).removesuffix("ppl") if isinstance(value, str) or is_int(value) else ""
        if not text.isdigit():
            raise ConfigError(f"{key}: {value!r} is not a number of people")
        if int(text) not in KNOWN_PPL:
            raise ConfigError(f"{key}: unknown ppl {int(text)}; "
                              f"puzzles exist for {KNOWN_PPL.start}..{KNOWN_PPL.stop - 1}")
        return f"{int(text)}ppl"

    def validation_records(self, level: str, n: int, seed: int) -> list[TaskRecord]:
        """Of the first `n` test puzzles, those distinct up to renaming (`sources.distinct_puzzles`)."""
        ppl = ppl_of_level(self.check_level(level))
        records = load_records(self.source, ppl, "test", n=n, seed=seed, path=self.path, hub_id=self.hub_id)
        if len(records) < n:
            raise ConfigError(f"eval.n: {n} validation puzzles asked at {level}, but data.source={self.source} has "
                              f"only {len(records)} distinct ones; lower eval.n")
        return [kk_record(record) for record in distinct_puzzles(records)]

    def training_records(self, level: str, want: int, held_out, *, seed: int,
                         spare: int) -> tuple[list[TaskRecord], int]:
        """Generated puzzles: `want` plus `spare` asked (the held-out ones dropped); a file (local, hub) is
        read only as far as its first `want` puzzles not held out."""
        ppl, guard = ppl_of_level(self.check_level(level)), [record.source for record in held_out]
        if self.source == "generated":
            pool = load_records(self.source, ppl, "train", n=want + (spare if guard else 0), seed=seed)
        else:
            pool = iter_records(self.source, ppl, "train", seed=seed, path=self.path, hub_id=self.hub_id)
        kept, dropped = split_disjoint(pool, guard, limit=None if self.source == "generated" else want)
        return [kk_record(record) for record in kept[:want]], dropped

    def grade(self, completion, columns: Mapping[str, Any]) -> Grade:
        return grade(completion, columns["names"], columns["solution"], fmt=self.fmt)

    def check_format(self, fmt: str) -> None:
        if fmt not in FORMATS:
            raise ConfigError(f"prompt.fmt: {fmt} is not a K&K answer format ({', '.join(FORMATS)}); "
                              "a GSM8K or reasoning-gym prompt needs its task: task=gsm8k or task=reasoning_gym")

    def reward_functions(self, settings: RewardSettings) -> dict[str, RewardFunc]:
        """Every component of `rewards.py` (format, think, answer, partial, overlong, tiered, logic_rl_strict)."""
        return reward_components(settings)

    def sft_target(self, record: TaskRecord, fmt: str) -> str:
        """The published chain of thought and answer in format `fmt` (`sft.reference_response`)."""
        return reference_response(record.source, fmt)

    def level_columns(self, level: str) -> dict[str, Any]:
        """A K&K row names its people count, `ppl`, as its rows always have."""
        return {"ppl": ppl_of_level(level)}

    def sample_fields(self, record: TaskRecord, text: str, g: Grade) -> dict[str, Any]:  # type: ignore[override]  # a task is handed its own grades
        return metrics.sample_fields(text, record.columns["names"], record.columns["solution"], g, self.fmt)

    def subset_metrics(self, samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return metrics.subset_metrics(samples)
