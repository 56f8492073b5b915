"""Knights and Knaves as a task: the project's own puzzles, behind the task interface, unchanged.

Levels are "2ppl".."8ppl" (people per puzzle); records come from `curriculum.tasks.kk.sources.load_records`
(generated, hub or local, with its seeds), the prompt from `curriculum.prompts.render_prompt` on the
quiz, and a record's columns are the rows' of `curriculum.data.to_rows` (names, solution, ppl), so
the runner's rows and validation's puzzles stay what they are. Two puzzles are the same problem
when their `canonical_key` is (renamed or reordered people).

The grader is `curriculum.tasks.kk.grading.grader.grade` at the prompt's format, which the task does not know:
whoever builds the task hands it in (`eval.settings.run_task`:
``build_task(cfg.task, grader=functools.partial(grade, fmt=cfg.prompt.fmt))``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from core.checks import ConfigError, is_int
from curriculum.tasks.base import Grade, RewardFunc, Task, TaskRecord, check_split
from curriculum.tasks.kk.canonical import canonical_key
from curriculum.tasks.kk.sources import HUB_ID, SOURCES, distinct_puzzles, iter_records, load_records, split_disjoint

# People per puzzle that the grammar and the published data cover.
KNOWN_PPL = range(2, 9)
LEVELS = tuple(f"{ppl}ppl" for ppl in KNOWN_PPL)

KKGrader = Callable[[Any, Sequence[str], Sequence[bool]], Grade]


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
    """K&K puzzles of 2..8 people (module docstring); `grader` grades a completion against names and solution."""

    name = "kk"

    def __init__(self, source: str = "generated", path: str | None = None, hub_id: str = HUB_ID,
                 grader: KKGrader | None = None):
        if source not in SOURCES:
            raise ConfigError(f"task.source: {source!r} is not one of {', '.join(SOURCES)}")
        self.source, self.path, self.hub_id, self.grader = source, path, hub_id, grader

    @property
    def levels(self) -> tuple[str, ...]:
        return LEVELS

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
        if self.grader is None:
            raise RuntimeError("KKTask.grade needs the K&K grader: build_task(cfg.task, grader=...) "
                               "(curriculum.tasks.kk.grading.grader.grade with the prompt's fmt)")
        return self.grader(completion, columns["names"], columns["solution"])

    def reward_functions(self) -> dict[str, RewardFunc]:
        """The two components that need only a grade: answer (correct) and format (format_ok).

        The rest of K&K's components (think, partial, overlong, tiered) and their presets are still in
        train/rewards.py (a run builds K&K's rewards there: `train.rewards.task_reward_funcs`); the grader
        they read now lives below, in curriculum/tasks/kk/grading/, so they can move here next.
        """
        return {"answer": self.answer_reward, "format": self.format_reward}

    def answer_reward(self, completions, names, solution, **kwargs) -> list[float]:
        return [float(self.grade(c, {"names": n, "solution": s}).correct)
                for c, n, s in zip(completions, names, solution, strict=True)]

    def format_reward(self, completions, names, solution, **kwargs) -> list[float]:
        return [float(self.grade(c, {"names": n, "solution": s}).format_ok)
                for c, n, s in zip(completions, names, solution, strict=True)]
