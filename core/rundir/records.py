"""run.json's records read back: the statuses a stage and a run hold, a stage's entry (`StageRecord`), and the
checks an entry read back must pass before a resume trusts it.

A path read from run.json is used only where the layout puts it (`stage_final`, `entry_problem`): a run folder
may come from someone else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from core.checks import is_int
from core.rundir.confine import OutsideRunError, inside_run
from core.rundir.layout import RUN_JSON, final_checkpoint, stage_dirname
from core.stage_kinds import StageKindFacts, recorded_kind


class Status(str, Enum):
    """A stage's (and the run's) status in run.json; a str, so it is written as its value."""

    PENDING = "pending"  # planned, not started
    RUNNING = "running"  # training (or killed while training)
    TRAINED = "trained"  # its final is published, not validated yet
    DONE = "done"  # validated: a later stage may start from its final
    FAILED = "failed"  # stopped by an error (run.json holds it); a resume starts it again

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class StageRecord:
    """One stage's entry in run.json, and its only reader and writer. Read back, an entry is untrusted and
    may be partial (a run still writing, an older run): a field it lacks is None (or empty)."""

    # the plan
    index: int | None = None
    name: str | None = None
    kind: str | None = None  # grpo | sft
    levels: dict = field(default_factory=dict)  # the task's level -> share of the stage's own mix
    pool_levels: dict = field(default_factory=dict)  # the pool's mix, with any replay of earlier levels
    level_label: str | None = None  # "3ppl", "2-6ppl" (a mix), "2steps"
    steps_budget: int | None = None
    pool: int | None = None  # training records
    removed_overlap: int | None = None  # training records dropped for being among the held-out ones
    # its training
    status: str | None = None
    policy_init: str | None = None  # the checkpoint it started from
    reference: str | None = None  # the checkpoint its KL is measured against (None: no KL term)
    policy_fingerprint: str | None = None  # of the weights it started from
    reference_fingerprint: str | None = None
    resumed_from: str | None = None  # the trainer checkpoint a resume continued from
    skipped_checkpoints: list = field(default_factory=list)  # newer ones a resume passed over: {checkpoint, problem}
    steps_done: int | None = None
    global_step_start: int | None = None
    global_step_end: int | None = None
    wall_seconds: float | None = None
    checkpoint: str | None = None  # its final, relative to the run directory
    final_fingerprints: list | None = None  # of the weights it ended with, on each process in rank order (equal)
    final_marker: str | None = None  # sha256 of its final's stage.json, which vouches for it (finals.py)
    distributed: dict | None = None  # how its trainer ran: {type (accelerate's, as it ran), processes, mixed_precision,
    # zero_stage (DeepSpeed)}
    end: dict | None = None  # why it ended: threshold | guard | budget
    guard_events: list = field(default_factory=list)  # the collapse guard's events, as they happened
    warnings: list = field(default_factory=list)  # what the run saw that the stage's numbers hide (a reward unscored)
    error: str | None = None
    # the validation after it
    final_metrics: dict = field(default_factory=dict)  # level -> {accuracy, mean_tokens}
    validation_cost: dict = field(default_factory=dict)  # what validating the final took (eval.cost)

    @classmethod
    def from_json(cls, entry: Mapping) -> StageRecord:
        """The record of a run.json stage entry; keys it does not name are left out.

        >>> StageRecord.from_json({"levels": {"2ppl": 0.5, "3ppl": 0.5}, "level_label": "2-3ppl", "other": 1}).levels
        {'2ppl': 0.5, '3ppl': 0.5}
        """
        return cls(**{k: entry[k] for k in cls.__dataclass_fields__ if entry.get(k) is not None})

    def to_json(self) -> dict:
        """The entry run.json holds: every field, by its name."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @property
    def done(self) -> bool:
        return self.status == Status.DONE

    @property
    def kind_facts(self) -> StageKindFacts:
        """What its kind is (core/stage_kinds.py): an entry without a kind, or with an unknown one, reads as GRPO."""
        return recorded_kind(self.kind)


def entry_problem(record: StageRecord, planned: str) -> str | None:
    """What is wrong with a stage entry read back from run.json for the planned stage `planned`, or None.

    run.json is rewritten whole by the run, so a wrong value came from outside it (an edit, another
    tool, another run's file); a resume trusts only entries that could have been written by the run.

    >>> entry_problem(StageRecord(index=1, name="2ppl", status="finished"), "2ppl")
    "status 'finished' is not one of pending, running, trained, done, failed"
    >>> entry_problem(StageRecord(index=1, name="2ppl", status="done", checkpoint="/etc"), "2ppl")
    "checkpoint '/etc' is not stages/1-2ppl/final, where a run publishes a stage's final"
    """
    statuses = [s.value for s in Status]
    expected = final_checkpoint(stage_dirname(record.index, planned)).as_posix() if is_int(record.index) else None
    if record.name != planned:
        return f"named {record.name!r}, but the plan's stage there is {planned!r}"
    if record.status not in statuses:
        return f"status {record.status!r} is not one of {', '.join(statuses)}"
    if record.checkpoint is not None and record.checkpoint != expected:
        return f"checkpoint {record.checkpoint!r} is not {expected}, where a run publishes a stage's final"
    for name in ("steps_done", "global_step_start", "global_step_end"):
        value = getattr(record, name)
        if value is not None and not (is_int(value) and value >= 0):
            return f"{name} {value!r} is not a whole number >= 0"
    if record.end is not None and not (isinstance(record.end, Mapping) and is_int(record.end.get("stage_step", 0))):
        return f"end {record.end!r} is not a record of why the stage ended"
    return None


def stage_final(run_dir: Path, record: StageRecord) -> Path:
    """Where a recorded stage's final is: `<run>/stages/<k>-<name>/final`, the one place a run publishes it.

    A path read from run.json is never followed: a recorded checkpoint elsewhere is an error naming it.
    """
    expected = final_checkpoint(stage_dirname(record.index, record.name))
    if record.checkpoint != expected.as_posix() or not inside_run(run_dir, expected):
        raise OutsideRunError(f"{Path(run_dir) / RUN_JSON}: stage {record.name}: checkpoint {record.checkpoint!r} "
                              f"is not {expected.as_posix()} inside the run; restore run.json, or start a new run")
    return Path(run_dir) / expected


def stage_records(manifest: Mapping) -> list[StageRecord]:
    """The typed stages of a run.json mapping, in its order (entries that are not mappings left out)."""
    return [StageRecord.from_json(s) for s in manifest.get("stages") or [] if isinstance(s, Mapping)]
