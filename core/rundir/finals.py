"""A stage's published final (`stages/<k>-<name>/final`): what training the stage produced (`StageResult`), and
what vouches for the final, read without loading weights.

A final is published with its marker, `stage.json`, written last: which stage of which run config and task
it is, and every file's size and sha256. run.json records the sha256 of that marker for the stage
(`stages[k].final_marker`), once the final is in place. Read back, a final is handed on (trained from, used
as a reference, validated by `python -m eval` inside its run) only when
- its files are the ones its marker recorded (`final_problem`: a flipped bit, a truncated copy), and
- its marker names the stage and is the one run.json recorded for it (`recorded_final_problem`): two done
  stages' finals swapped, or one of another run put in place, are each intact with their own marker, and
  would otherwise be trained from as the stage run.json says they are.
The marker's digest covers its files' digests, so comparing it with run.json checks every byte of the final
at the cost of hashing its files once. A final rewritten in bfloat16 once nothing reads it (train/run/finals.py)
gets a new marker naming the one it replaces (`compacted_from`), so run.json's record still vouches for it,
also after a kill between the rewrite and run.json's next write.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from core.parse_limits import ParseLimitError, parse_json
from core.rundir.digests import damage, file_digest, folder_digests
from core.rundir.records import StageRecord

FINAL_MARKER = "stage.json"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


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
    final_marker: str | None = None  # sha256 of the published final's stage.json (core/rundir/finals.py)

    def marker(self, stage_name: str, config_hash: str, task: str, init: str) -> dict:
        """The final's `stage.json`: which stage of which config and task it is, where it started, and this result."""
        return {"stage": stage_name, "config_hash": config_hash, "task": task, "steps_done": self.steps_done,
                "init": init,
                "policy_fingerprint": self.policy_fingerprint, "reference": self.reference,
                "reference_fingerprint": self.reference_fingerprint, "final_fingerprints": self.final_fingerprints,
                "distributed": self.distributed}

    @classmethod
    def from_marker(cls, checkpoint: str, info: Mapping, final_marker: str) -> StageResult:
        """The result a published final's `stage.json` (of sha256 `final_marker`) holds (nothing of how long it
        took)."""
        return cls(checkpoint, int(info["steps_done"]), info.get("policy_fingerprint"), info.get("reference"),
                   info.get("reference_fingerprint"), final_fingerprints=info.get("final_fingerprints"),
                   distributed=info.get("distributed"), final_marker=final_marker)


def final_digests(folder: Path) -> dict:
    """The digests a final's marker records: every file in it but the marker itself."""
    return folder_digests(folder, exclude=(FINAL_MARKER,))


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
    """Why the final at `final_dir` is not the one run.json's `record` of its stage vouches for (damaged,
    another stage's, another run's), None when it is.

    A record without `final_marker` (a final published before run.json knew of it, or a run recorded before
    markers were kept) is checked by its marker's stage name alone.
    """
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
    """A final's marker as JSON (any JSON: it is read from disk), or None when it is missing or not JSON; a
    ParseLimitError ("its stage.json: JSON nested deeper than ...") when it nests beyond core.parse_limits' limit."""
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
