"""How a task's validation is shown: the words the report and the console use for it, the rates it adds to
every validation row, and what of its graded samples is worth reading.

A task declares one :class:`TaskReport` (`Task.report`); a run records it in run.json (`task_report`), so
the report of a run folder reads plain data, never the task's code (a folder may come from anyone).
Everything here is text and keys: what a task leaves out is absent from its report, not shown empty.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from core.checks import is_number


@dataclass(frozen=True)
class Rate:
    """A share of completions (0..1) a task adds to its validation rows, and where it is shown."""

    key: str  # the validation row's column
    name: str  # what the console's caption calls it ("lenient")
    title: str | None = None  # the report's section heading (None: not in the report)
    header: str | None = None  # the console's column header, a line break allowed (None: not in the console)
    caption: str = ""  # what the console's caption says of it ("of those with reasoning")
    # the row columns counting the completions it is a share of, the first present one (none: every completion)
    counted: tuple[str, ...] = ()
    beside_accuracy: bool = False  # another reading of accuracy: shown next to it, left out where equal to it
    note: str = ""  # what the report says under its table


@dataclass(frozen=True)
class TaskReport:
    """What the report, the console and the tracker's tables say of one task's validation."""

    record: str = "problem"  # what one record is called ("puzzle")
    distinct: str = "distinct problems"  # what a validation pool's n counts
    pool_note: str = ""  # why a pool holds no repeats, said beside the intervals ("up to renaming the people")
    accuracy: str = "answer right"  # what a right completion is, on the accuracy axis
    level_column: str = "level"  # the row column the console names a subset by (K&K: its people count)
    rates: tuple[Rate, ...] = ()
    # (label, sample key): the first graded sample whose key is true is shown, beside the first right and
    # wrong, the longest and the shortest
    picks: tuple[tuple[str, str], ...] = ()
    facts: tuple[tuple[str, str], ...] = ()  # (label, sample key): shown with each sample where present
    sample_columns: tuple[str, ...] = ()  # the tracker's sample table, beside every task's columns
    format_reward: str | None = None  # the reward component that is the format rate (its key: `rewards/<key>/mean`)
    chance: Mapping[str, float] = field(default_factory=dict)  # level -> accuracy of a blind guess
    chance_note: str = ""  # how chance is reckoned, under the accuracy plot
    # the console's word before a level's label in a stage banner ("level 2steps", beside "2 steps" of training);
    # empty where the label says what it is (K&K's "2ppl")
    level_word: str = "level"

    def as_json(self) -> dict:
        """The record run.json keeps.

        >>> TaskReport.from_json(TaskReport(record="puzzle", rates=(Rate("x", "x"),)).as_json()).rates[0].key
        'x'
        """
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data) -> TaskReport | None:
        """The record run.json holds, or None when it holds none that reads (written by anyone: every field
        is checked for its type, and one of another type is left at its default).

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

    def rate(self, key: str) -> Rate | None:
        """The task's rate of row column `key`, None for every task's own (accuracy, format, ...)."""
        return next((r for r in self.rates if r.key == key), None)


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
