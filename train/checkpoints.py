"""Checkpoints on disk: which one a resume continues from, and which final a later stage may start from.

A trainer checkpoint (`stages/<k>-<name>/trainer/checkpoint-N`) counts once it is complete and
intact: transformers writes `trainer_state.json` after everything else in it, then `CheckpointDigests`
records every file's size and sha256 (`checksums.json`, core/digests.py). Read back, one without them
(a kill during its save) or with a file that differs from them (damage: a flipped bit, a truncated
copy) is passed over, and the stage continues from the one before it, or from its start.

A stage's final is written to `final.tmp`, its marker `stage.json` (which stage of which config, and
its files' digests) written last, then renamed to `final`: a final without its marker, or with a file
that differs from what the marker recorded, is never handed to a later stage.
"""

from __future__ import annotations

import json
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from core.digests import DIGESTS, damage, folder_digests
from core.distributed import SINGLE, Processes, barrier
from core.jsonl import write_json_atomic
from core.rundir import load_file

FINAL_MARKER = "stage.json"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


class CheckpointDigests(TrainerCallback):
    """Record a trainer checkpoint's digests once transformers has saved all of it (the main process writes).

    With many processes every rank writes its own RNG state into the checkpoint: all ranks meet first, so
    the digests cover every rank's file (a rank killed mid-save leaves a checkpoint without digests).
    """

    def __init__(self, processes: Processes = SINGLE):
        self.processes = processes

    def on_save(self, args, state, control, **kwargs):
        barrier(self.processes)
        if args.should_save:
            folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            write_json_atomic(folder / DIGESTS, folder_digests(folder))


def checkpoint_problem(folder: Path, world_size: int = 1) -> str | None:
    """Why a trainer checkpoint of `world_size` processes may not be resumed from (incomplete or damaged),
    None when it may."""
    try:
        json.loads((folder / TRAINER_STATE_NAME).read_text())
    except (OSError, ValueError):
        return f"no complete {TRAINER_STATE_NAME} (a kill while the checkpoint was saved)"
    if not (folder / DIGESTS).exists():
        return f"no {DIGESTS} (a kill before the checkpoint's save finished)"
    missing = [rank for rank in range(world_size) if world_size > 1 and not _rng_state_whole(folder, rank)]
    if missing:  # a resume without a rank's RNG state would not repeat the run
        return f"no whole RNG state of rank {missing[0]} (rng_state_{missing[0]}.pth)"
    return _weights_problem(folder, load_file(folder / DIGESTS))


def _rng_state_whole(folder: Path, rank: int) -> bool:
    """torch.save writes a zip archive, whose directory comes last: a cut-off file is no zip."""
    return zipfile.is_zipfile(folder / f"rng_state_{rank}.pth")


@dataclass(frozen=True)
class CheckpointScan:
    """The newest trainer checkpoint a resume may continue from (None: the stage's start), and the newer
    ones passed over, each {"checkpoint": its folder name, "problem": why}."""

    usable: Path | None
    skipped: list[dict] = field(default_factory=list)


def scan_checkpoints(trainer_dir: Path, world_size: int = 1) -> CheckpointScan:
    """The trainer checkpoints of a stage (trained by `world_size` processes), newest first, up to the first
    complete and intact one."""
    if not trainer_dir.is_dir():
        return CheckpointScan(None)
    steps = []
    for child in trainer_dir.iterdir():
        match = re.fullmatch(rf"{PREFIX_CHECKPOINT_DIR}-(\d+)", child.name)
        if match and child.is_dir():
            steps.append((int(match.group(1)), child))
    skipped = []
    for _, child in sorted(steps, reverse=True):
        problem = checkpoint_problem(child, world_size)
        if problem is None:
            return CheckpointScan(child, skipped)
        skipped.append({"checkpoint": child.name, "problem": problem})
    return CheckpointScan(None, skipped)


def last_complete_checkpoint(trainer_dir: Path, world_size: int = 1) -> Path | None:
    """The newest trainer checkpoint that is complete and intact, else None."""
    return scan_checkpoints(trainer_dir, world_size).usable


def final_digests(folder: Path) -> dict:
    """The digests a final's marker records: every file in it but the marker itself."""
    return folder_digests(folder, exclude=(FINAL_MARKER,))


def final_problem(final_dir: Path) -> str | None:
    """Why a stage's final may not be handed on (missing, never published, damaged), None when it may."""
    if not final_dir.is_dir():
        return "missing"
    try:
        info = json.loads((final_dir / FINAL_MARKER).read_text())
    except (OSError, ValueError):
        return f"no complete {FINAL_MARKER} (a kill before it was published, or an edit)"
    if not isinstance(info, dict):
        return f"its {FINAL_MARKER} is not a stage's marker"
    return _weights_problem(final_dir, info.get("files"))


def final_info(final_dir: Path) -> dict | None:
    """The `stage.json` of a complete, intact final checkpoint, or None when it is missing or damaged."""
    if final_problem(final_dir) is not None:
        return None
    return json.loads((final_dir / FINAL_MARKER).read_text())


def _weights_problem(folder: Path, recorded) -> str | None:
    """`damage` of a checkpoint against its recorded digests, which must name its weights."""
    if isinstance(recorded, dict) and not any(name in recorded for name in WEIGHT_FILES):
        return f"its recorded files hold no weights ({', '.join(WEIGHT_FILES)})"
    return damage(folder, recorded)
