"""The run directory as a contract between its writers (`train/`) and its readers (`eval/`, the report).

A run directory holds `run.json` (the manifest), `metrics.jsonl` (every trainer log line),
`validation.jsonl` (one row per stage and subset), `validation_steps.jsonl` (validations inside a
stage), `config.yaml` (the resolved config), `samples/<k>-<name>/<level>.jsonl` (graded completions)
and `stages/<k>-<name>/final/` (a loadable checkpoint; `trainer/` beside it while the stage trains).
Everything here is plain Python: reading a run needs neither torch nor the trainer. Its JSON and
JSONL files are written and read through `core/jsonl.py` (a kill never leaves half a record), and
`core/runlock.py` keeps it to one writing process at a time.

A run folder may come from someone else, so the run writes and truncates only regular files inside
its directory: a holder of the run lock first refuses a directory with a symbolic link that leads out
of it, every writer here opens its file without following a link (both in `core/confined.py`), and a
path read from run.json is used only where the contract puts it (`stage_final`, `entry_problem`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import yaml

from core.checks import is_int, is_number
from core.confined import OutsideRunError, inside_run, read_inside
from core.parse_limits import ParseLimitError, parse_json, parse_yaml
from core.stage_kinds import StageKindFacts, recorded_kind

log = logging.getLogger(__name__)
RUN_JSON = "run.json"
METRICS = "metrics.jsonl"
VALIDATION = "validation.jsonl"
VALIDATION_STEPS = "validation_steps.jsonl"
CONFIG = "config.yaml"
ERROR = "error.txt"  # a failed job's traceback (removed when a resume finishes it)
SAMPLES = "samples"
EVALUATION = "evaluation.json"  # what `python -m eval` validated, in its folder (outputs/eval/<time>/)
ROLLOUTS = "rollouts.jsonl"  # training rollouts sampled every `rollouts.every` steps (train/rollouts.py)
STAGES = "stages"
REFUSED_FINAL = "final.refused"  # a done stage's final a resume refused, set aside beside `final/`
BASELINE = "baseline"  # validation before any stage: stage 0, samples/0-baseline


def stage_dirname(index: int, name: str) -> str:
    """`<k>-<name>`: a stage's folder under `stages/` and `samples/`.

    >>> stage_dirname(5, "6ppl")
    '5-6ppl'
    """
    return f"{index}-{name}"


def stage_path(run_dir: Path, dirname: str) -> Path:
    """`<run>/stages/<k>-<name>`: the stage's trainer checkpoints (`trainer/`) and its `final/`."""
    return run_dir / STAGES / dirname


def final_checkpoint(dirname: str) -> Path:
    """`stages/<k>-<name>/final`, relative to the run directory (run.json records it so: a run may be moved).

    >>> final_checkpoint("1-2ppl").as_posix()
    'stages/1-2ppl/final'
    """
    return Path(STAGES) / dirname / "final"


def run_of_final(checkpoint: Path) -> Path | None:
    """The run directory a stage's final belongs to (`<run>/stages/<k>-<name>/final`), else None.

    >>> run_of_final(Path("/o/runs/x/stages/1-2ppl/final")).as_posix(), run_of_final(Path("/models/qwen"))
    ('/o/runs/x', None)
    """
    parts = checkpoint.parts
    if len(parts) >= 3 and parts[-1] == "final" and parts[-3] == STAGES:
        return checkpoint.parents[2]
    return None


def samples_dir(run_dir: Path, dirname: str) -> Path:
    """`<run>/samples/<k>-<name>` (`0-baseline` for the baseline): one `<level>.jsonl` per subset."""
    return run_dir / SAMPLES / dirname


# --- status ---------------------------------------------------------------------------------------


class Status(str, Enum):
    """A stage's (and the run's) status in run.json; a str, so it is written as its value."""

    PENDING = "pending"  # planned, not started
    RUNNING = "running"  # training (or killed while training)
    TRAINED = "trained"  # its final is published, not validated yet
    DONE = "done"  # validated: a later stage may start from its final
    FAILED = "failed"  # stopped by an error (run.json holds it); a resume starts it again

    def __str__(self) -> str:
        return self.value


# The statuses a stage may move to from each. A resume re-enters a running, trained or failed stage:
# it trains again (running) or adopts a final already published (trained); a done stage whose final
# is damaged goes back to pending to be retrained.
STAGE_TRANSITIONS: dict[Status, frozenset[Status]] = {
    Status.PENDING: frozenset({Status.RUNNING, Status.TRAINED, Status.FAILED}),
    Status.RUNNING: frozenset({Status.RUNNING, Status.TRAINED, Status.FAILED}),
    Status.TRAINED: frozenset({Status.RUNNING, Status.TRAINED, Status.DONE, Status.FAILED}),
    Status.FAILED: frozenset({Status.RUNNING, Status.TRAINED, Status.FAILED}),
    Status.DONE: frozenset({Status.PENDING}),
}
RUN_STATUSES = frozenset({Status.RUNNING, Status.DONE, Status.FAILED})


def stage_transition(stage: str, old: str, new: str) -> Status:
    """`new` as a Status when a stage may move there from `old`; else an error naming both.

    >>> stage_transition("2ppl", "trained", "done")
    <Status.DONE: 'done'>
    >>> stage_transition("2ppl", "pending", "done")
    Traceback (most recent call last):
    ValueError: stage 2ppl: status pending -> done is not allowed (pending may become failed, running, trained)
    """
    before, after = Status(old), Status(new)
    if after not in STAGE_TRANSITIONS[before]:
        allowed = ", ".join(sorted(s.value for s in STAGE_TRANSITIONS[before]))
        raise ValueError(f"stage {stage}: status {before} -> {after} is not allowed ({before} may become {allowed})")
    return after


def run_status(new: str) -> Status:
    """`new` as a run's Status (running, done or failed); else an error."""
    status = Status(new)
    if status not in RUN_STATUSES:
        raise ValueError(f"run status {status} is not one of running, done, failed")
    return status


# --- records --------------------------------------------------------------------------------------


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
    final_marker: str | None = None  # sha256 of its final's stage.json: what vouches for the final (core/published.py)
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


def row_level(row: Mapping) -> str | None:
    """The level a validation row is about: its `level` when that is a non-empty string, else None (a row read
    back is untrusted: a damaged one is left out, never a key of another type).

    >>> row_level({"level": "2steps"}), row_level({"level": ["2ppl"]}), row_level({"ppl": 3})
    ('2steps', None, None)
    """
    level = row.get("level")
    return level if isinstance(level, str) and level else None


def level_order(key: str) -> tuple:
    """A sort key that puts levels in their natural order: by the first number in them, then by text
    ("2ppl" < "10ppl", "5steps" < "6+steps", "level2" < "level10").

    >>> sorted(["10ppl", "2ppl", "6+steps", "5steps", "level10", "level2", "default"], key=level_order)
    ['2ppl', '5steps', '6+steps', '10ppl', 'default', 'level2', 'level10']
    """
    text = str(key)
    match = re.search(r"\d+", text)
    prefix = text[:match.start()] if match else text
    return (prefix, int(match.group()) if match else -1, text)


def samples_file(samples: Path, level: str) -> Path:
    """`<samples dir>/<level>.jsonl`: one subset's graded completions."""
    return samples / f"{level}.jsonl"


def validation_summary(rows: Iterable[Mapping]) -> dict:
    """run.json's summary of validation rows: {level: {accuracy, mean_tokens}}.

    >>> validation_summary([{"level": "2ppl", "accuracy": 0.5, "mean_tokens": 30.0, "n": 8}])
    {'2ppl': {'accuracy': 0.5, 'mean_tokens': 30.0}}
    """
    return {row_level(r): {"accuracy": r["accuracy"], "mean_tokens": r["mean_tokens"]} for r in rows}


def final_accuracy(manifest: Mapping) -> dict[str, float]:
    """Accuracy per level after the last stage, in level order; {} until that stage is validated.

    >>> final_accuracy({"stages": [{"final_metrics": {"3ppl": {"accuracy": 0.25}, "2ppl": {"accuracy": 0.5}}}]})
    {'2ppl': 0.5, '3ppl': 0.25}
    """
    stages = manifest.get("stages") or []
    final = (stages[-1].get("final_metrics") or {}) if stages else {}
    if not isinstance(final, Mapping):
        return {}
    found = {str(k): _number(v.get("accuracy")) for k, v in final.items() if isinstance(v, Mapping)}
    return {level: found[level] for level in sorted(found, key=level_order) if found[level] is not None}


def objective(name: str, accuracy: Mapping[str, float]) -> float | None:
    """The sweep objective `name` (mean_final_accuracy | final_accuracy_<level>) of the final accuracies;
    None when they do not hold it (nothing validated, or not that subset).

    >>> objective("mean_final_accuracy", {"2ppl": 0.5, "3ppl": 0.25})
    0.375
    >>> objective("final_accuracy_2ppl", {"2ppl": 0.5}), objective("final_accuracy_4ppl", {"2ppl": 0.5})
    (0.5, None)
    """
    if not accuracy:
        return None
    if name == "mean_final_accuracy":
        return sum(accuracy.values()) / len(accuracy)
    return accuracy.get(name.removeprefix("final_accuracy_")) if name.startswith("final_accuracy_") else None


def _number(value) -> float | None:
    return float(value) if is_number(value, finite=True) else None


# --- lenient readers (a run may be writing while it is read) ---------------------------------------


def load_file(path: Path, *, inside: Path | None = None):
    """A JSON (.json) or YAML file's data; None when it is missing or unreadable (a job not started). `inside`: a
    folder received from elsewhere (a report's run), which `path` is read from without following a link out of it."""
    try:
        raw = path.read_bytes() if inside is None else read_inside(inside, path)
        if raw is None:
            return None
        text = raw.decode()
        return parse_json(text, str(path)) if path.suffix == ".json" else parse_yaml(text, str(path))
    except ParseLimitError as err:  # beyond a limit: said, naming the file (a reader sees only None)
        log.warning("%s", err)
        return None
    except (OSError, ValueError, yaml.YAMLError):
        return None


def tracker_group(run_dir: Path, *, in_sweep: bool) -> str:
    """The tracker group of a run: its sweep folder for a sweep's job (`<sweep>/<n>`), else its own folder, each
    named by its parent and itself; a run's training and every `python -m eval` of its finals share it.

    >>> tracker_group(Path("outputs/multirun/2026-12-01_10-00-00/3"), in_sweep=True)
    'multirun/2026-12-01_10-00-00'
    >>> tracker_group(Path("outputs/runs/2026-12-01_11-00-00"), in_sweep=False)
    'runs/2026-12-01_11-00-00'
    """
    folder = run_dir.parent if in_sweep else run_dir
    return f"{folder.parent.name}/{folder.name}"


def read_mapping(path: Path, *, inside: Path | None = None) -> dict:
    """`load_file` for a file that holds a mapping (run.json, config.yaml): {} when it does not."""
    data = load_file(path, inside=inside)
    return data if isinstance(data, dict) else {}
