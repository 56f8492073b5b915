"""Trainer checkpoints on disk: which one a resume continues from (a stage's final: core/rundir/records.py).

A trainer checkpoint (`stages/<k>-<name>/trainer/checkpoint-N`) counts once it is complete and
intact: transformers writes `trainer_state.json` after everything else in it, then `CheckpointDigests`
records every file's size and sha256 (`checksums.json`, core/rundir/records.py). Read back, one without them
(a kill during its save) or with a file that differs from them (damage: a flipped bit, a truncated
copy) is passed over, and the stage continues from the one before it, or from its start.

A stage's final is written to `final.tmp`, its marker `stage.json` (which stage of which config, and
its files' digests) written last, then renamed to `final`: a final without its marker, with a file that
differs from what the marker recorded, or whose marker is not the one run.json recorded for its stage, is
never handed to a later stage (core/rundir/records.py).
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

from core.distributed import SINGLE, Processes, barrier
from core.rundir.files import load_file, write_json_atomic
from core.rundir.records import DIGESTS, folder_digests, weights_problem


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
    return weights_problem(folder, load_file(folder / DIGESTS))


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
    skipped: list[dict] = []
    for _, child in sorted(steps, reverse=True):
        problem = checkpoint_problem(child, world_size)
        if problem is None:
            return CheckpointScan(child, skipped)
        skipped.append({"checkpoint": child.name, "problem": problem})
    return CheckpointScan(None, skipped)


def checkpoint_step(checkpoint: Path) -> int:
    """The global step a trainer checkpoint was saved at, as transformers names it.

    >>> checkpoint_step(Path("stages/1-a/trainer/checkpoint-12"))
    12
    """
    return int(checkpoint.name.removeprefix(f"{PREFIX_CHECKPOINT_DIR}-"))

