"""What a run's files record, read back untrusted: run.json's stage entries (`StageRecord`), a stage's final and
what vouches for it, checkpoint digests, validation summaries. A path read from run.json is used only where the layout
puts it. A final's marker, `stage.json`, is written last (every file's size and sha256) and run.json records the
marker's sha256 (`final_marker`): two finals swapped are each intact, so both are checked.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from core.checks import is_int, is_number
from core.parse_limits import ParseLimitError, parse_json
from core.rundir.files import RUN_JSON, OutsideRunError, final_checkpoint, inside_run, stage_dirname
from core.stage_kinds import StageKindFacts, recorded_kind

DIGESTS = "checksums.json"  # a trainer checkpoint's record, written after everything else in it
FINAL_MARKER = "stage.json"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
_CHUNK = 1 << 20


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
    """One stage's entry in run.json; read back, a field it lacks is None (or empty)."""

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
    final_marker: str | None = None  # sha256 of its final's stage.json, which vouches for it
    distributed: dict | None = None  # how its trainer ran: {type (accelerate's, as it ran), processes, mixed_precision,
    # zero_stage (DeepSpeed)}
    end: dict | None = None  # why it ended: threshold | guard | budget
    guard_events: list = field(default_factory=list)  # the collapse guard's events, as they happened
    warnings: list = field(default_factory=list)  # what the run saw that the stage's numbers hide (a reward unscored)
    error: str | None = None
    # the validation after it
    final_metrics: dict = field(default_factory=dict)  # level -> {accuracy, mean_tokens}
    validation_cost: dict = field(default_factory=dict)  # what validating the final took (eval.generation)

    @classmethod
    def from_json(cls, entry: Mapping) -> StageRecord:
        """The record of a run.json stage entry; keys it does not name are left out.

        >>> StageRecord.from_json({"levels": {"2ppl": 0.5, "3ppl": 0.5}, "level_label": "2-3ppl", "other": 1}).levels
        {'2ppl': 0.5, '3ppl': 0.5}
        """
        return cls(**{k: entry[k] for k in cls.__dataclass_fields__ if entry.get(k) is not None})

    @property
    def done(self) -> bool:
        return self.status == Status.DONE

    @property
    def kind_facts(self) -> StageKindFacts:
        """An entry without a kind, or with an unknown one, reads as GRPO."""
        return recorded_kind(self.kind)


def entry_problem(record: StageRecord, planned: str) -> str | None:
    """What is wrong with a run.json stage entry for the planned stage `planned`, or None.

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
    """`<run>/stages/<k>-<name>/final`; a checkpoint run.json records elsewhere is an error (never followed)."""
    expected = final_checkpoint(stage_dirname(record.index, record.name))
    if record.checkpoint != expected.as_posix() or not inside_run(run_dir, expected):
        raise OutsideRunError(f"{Path(run_dir) / RUN_JSON}: stage {record.name}: checkpoint {record.checkpoint!r} "
                              f"is not {expected.as_posix()} inside the run; restore run.json, or start a new run")
    return Path(run_dir) / expected


def stage_records(manifest: Mapping) -> list[StageRecord]:
    """The typed stages of a run.json mapping, in its order (entries that are not mappings left out)."""
    return [StageRecord.from_json(s) for s in manifest.get("stages") or [] if isinstance(s, Mapping)]


# Checkpoint digests (size, sha256): a file checked unloaded, what a fingerprint cannot cover, the damage named
def file_digest(path: Path) -> str:
    """The sha256 of a file's bytes, read in chunks (a checkpoint's weights may be larger than memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def folder_digests(folder: Path, *, exclude: tuple[str, ...] = (DIGESTS,)) -> dict[str, dict]:
    """{path relative to `folder`: {"bytes", "sha256"}} for every regular file under it, but `exclude`'s names.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp()); _ = (folder / "w.bin").write_bytes(b"abc")
    >>> folder_digests(folder)["w.bin"]["bytes"], folder_digests(folder)["w.bin"]["sha256"][:12]
    (3, 'ba7816bf8f01')
    """
    found = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if path.is_file() and not path.is_symlink() and relative not in exclude:
            found[relative] = {"bytes": path.stat().st_size, "sha256": file_digest(path)}
    return found


def damage(folder: Path, recorded) -> str | None:
    """What is wrong with `folder` against its `recorded` digests, or None: sizes first (naming a truncated file
    without hashing), then hashes; files added since are ignored.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp()); _ = (folder / "w.bin").write_bytes(b"abc")
    >>> saved = folder_digests(folder)
    >>> damage(folder, saved) is None
    True
    >>> _ = (folder / "w.bin").write_bytes(b"abd"); damage(folder, saved)
    'w.bin: its sha256 differs from the one recorded when it was saved'
    >>> _ = (folder / "w.bin").write_bytes(b"ab"); damage(folder, saved)
    'w.bin: 2 bytes, 3 when it was saved (truncated?)'
    >>> damage(folder, None)
    'no content hashes recorded (saved before they were kept, or edited)'
    """
    if not _well_formed(recorded):
        return "no content hashes recorded (saved before they were kept, or edited)"
    for name, entry in recorded.items():
        path = folder / name
        if not path.is_file() or path.is_symlink():
            return f"{name}: missing (it was saved with the checkpoint)"
        size = path.stat().st_size
        if size != entry["bytes"]:
            return f"{name}: {size} bytes, {entry['bytes']} when it was saved (truncated?)"
    for name, entry in recorded.items():
        if file_digest(folder / name) != entry["sha256"]:
            return f"{name}: its sha256 differs from the one recorded when it was saved"
    return None


def _well_formed(recorded) -> bool:
    """A non-empty mapping of plain relative file names to {bytes: int, sha256: str} (it is read from disk)."""
    if not isinstance(recorded, Mapping) or not recorded:
        return False
    for name, entry in recorded.items():
        if not isinstance(name, str) or name.startswith("/") or ".." in Path(name).parts:
            return False
        if not (isinstance(entry, Mapping) and isinstance(entry.get("bytes"), int)
                and isinstance(entry.get("sha256"), str)):
            return False
    return True


@dataclass(frozen=True)
class StageResult:
    """What training a stage produced, as run.json records it; its final's `stage.json` holds most of it."""

    checkpoint: str  # its final, relative to the run directory (a run directory may be moved)
    steps_done: int
    policy_fingerprint: str | None  # of the weights it started from
    reference: str | None  # the checkpoint its KL is measured against
    reference_fingerprint: str | None
    resumed_from: str | None = None  # the trainer checkpoint it continued from
    wall_seconds: float | None = None  # training and publishing (None: a final adopted after a kill)
    final_fingerprints: list[str] | None = None  # of the weights it ended with, per rank (gathered where sharded)
    distributed: dict | None = None  # how its trainer ran (`distributed_record`)
    final_marker: str | None = None  # sha256 of the published final's stage.json

    def marker(self, stage_name: str, config_hash: str, task: str, init: str) -> dict:
        """The final's `stage.json`: which stage of which config and task it is, where it started, and this result."""
        return {"stage": stage_name, "config_hash": config_hash, "task": task, "steps_done": self.steps_done,
                "init": init,
                "policy_fingerprint": self.policy_fingerprint, "reference": self.reference,
                "reference_fingerprint": self.reference_fingerprint, "final_fingerprints": self.final_fingerprints,
                "distributed": self.distributed}

    @classmethod
    def from_marker(cls, checkpoint: str, info: Mapping, final_marker: str) -> StageResult:
        """The result a published final's `stage.json` (of sha256 `final_marker`) holds."""
        return cls(checkpoint, int(info["steps_done"]), info.get("policy_fingerprint"), info.get("reference"),
                   info.get("reference_fingerprint"), final_fingerprints=info.get("final_fingerprints"),
                   distributed=info.get("distributed"), final_marker=final_marker)


def weights_problem(folder: Path, recorded) -> str | None:
    """`damage` of a checkpoint against its recorded digests, which must name its weights."""
    if isinstance(recorded, dict) and not any(name in recorded for name in WEIGHT_FILES):
        return f"its recorded files hold no weights ({', '.join(WEIGHT_FILES)})"
    return damage(folder, recorded)


def final_problem(final_dir: Path) -> str | None:
    """Why a stage's final may not be handed on (missing, never published, damaged), None when it may."""
    if not final_dir.is_dir():
        return "missing"
    try:
        info = _marker(final_dir)
    except ParseLimitError as err:  # a marker crafted to take its reader down: refused, naming it
        return str(err)
    if info is None:
        return f"no complete {FINAL_MARKER} (a kill before it was published, or an edit)"
    if not isinstance(info, dict):
        return f"its {FINAL_MARKER} is not a stage's marker"
    return weights_problem(final_dir, info.get("files"))


def final_info(final_dir: Path) -> dict | None:
    """The `stage.json` of a complete, intact final checkpoint, or None when it is missing or damaged."""
    if final_problem(final_dir) is not None:
        return None
    return _marker(final_dir)


def marker_digest(final_dir: Path) -> str:
    """The sha256 of a final's marker: what run.json records for the stage once the final is in place."""
    return file_digest(final_dir / FINAL_MARKER)


def recorded_final_problem(final_dir: Path, record: StageRecord) -> str | None:
    """Why the final at `final_dir` is not the one `record` vouches for (damaged, another stage's or run's), or
    None; a record without `final_marker` (a kill before run.json recorded it) is checked by stage name alone."""
    problem = final_problem(final_dir)
    if problem is not None:
        return problem
    info = _marker(final_dir)
    if info.get("stage") != record.name:
        return (f"its {FINAL_MARKER} names stage {info.get('stage')!r}, not {record.name!r}: another stage's final "
                "is in its place (finals moved or swapped)")
    if record.final_marker is None:
        return None
    digest = marker_digest(final_dir)
    if record.final_marker not in (digest, info.get("compacted_from")):
        return (f"its {FINAL_MARKER} (sha256 {digest[:12]}) is not the one run.json recorded for stage {record.name} "
                f"(sha256 {str(record.final_marker)[:12]}): a final of another run, or an edit, is in its place")
    return None


def _marker(final_dir: Path):
    """A final's marker as JSON (any JSON), None when missing or not JSON; ParseLimitError when nested too deep."""
    try:
        text = (final_dir / FINAL_MARKER).read_text()
    except (OSError, ValueError):  # missing, or not UTF-8
        return None
    try:
        return parse_json(text, f"its {FINAL_MARKER}")
    except ParseLimitError:
        raise
    except ValueError:
        return None


def row_level(row: Mapping) -> str | None:
    """The level a validation row is about: its `level` when that is a non-empty string, else None.

    >>> row_level({"level": "2steps"}), row_level({"level": ["2ppl"]}), row_level({"ppl": 3})
    ('2steps', None, None)
    """
    level = row.get("level")
    return level if isinstance(level, str) and level else None


def level_order(key: str) -> tuple:
    """A sort key for levels in natural order: by the first number in them, then by text.

    >>> sorted(["10ppl", "2ppl", "6+steps", "5steps", "level10", "level2", "default"], key=level_order)
    ['2ppl', '5steps', '6+steps', '10ppl', 'default', 'level2', 'level10']
    """
    text = str(key)
    match = re.search(r"\d+", text)
    prefix = text[:match.start()] if match else text
    return (prefix, int(match.group()) if match else -1, text)


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
    found = {str(k): v.get("accuracy") for k, v in final.items() if isinstance(v, Mapping)}
    return {level: float(found[level]) for level in sorted(found, key=level_order)
            if is_number(found[level], finite=True)}


def objective(name: str, accuracy: Mapping[str, float]) -> float | None:
    """The sweep objective `name` (mean_final_accuracy | final_accuracy_<level>), None when not held.

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
