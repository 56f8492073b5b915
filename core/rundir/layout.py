"""The run directory's layout: its file names and stage folders, shared by its writers (`train/`) and readers
(`eval/`, the report).

A run directory holds `run.json` (the manifest), `metrics.jsonl` (every trainer log line),
`validation.jsonl` (one row per stage and subset), `validation_steps.jsonl` (validations inside a
stage), `config.yaml` (the resolved config), `samples/<k>-<name>/<level>.jsonl` (graded completions)
and `stages/<k>-<name>/final/` (a loadable checkpoint; `trainer/` beside it while the stage trains).
Everything in `core/rundir/` is plain Python: reading a run needs neither torch nor the trainer. Its JSON
and JSONL files are written and read through `core/rundir/confine.py` and `core/rundir/jsonl.py` (a kill
never leaves half a record, a write never leaves the run), and `core/rundir/lock.py` keeps it to one
writing process at a time.
"""

from __future__ import annotations

import shlex
from pathlib import Path

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
TRACKER_DIR = "wandb"  # wandb.init(dir=<run>) keeps its files here


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


def samples_file(samples: Path, level: str) -> Path:
    """`<samples dir>/<level>.jsonl`: one subset's graded completions."""
    return samples / f"{level}.jsonl"


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


def report_command(folder: Path | str) -> str:
    """The shell command for `folder`'s report, quoted for a shell where it needs it.

    `python -m eval.report <dir>` rather than `make report RUN=<dir>`: the report needs only the installed
    package, and make's `report` target first checks (and for a user who installed with pip, runs) the whole
    `make install`.

    >>> report_command(Path("outputs/runs/x")), report_command("my runs/x")
    ('python -m eval.report outputs/runs/x', "python -m eval.report 'my runs/x'")
    """
    return f"python -m eval.report {shlex.quote(str(folder))}"
