"""How `python -m train` ends when it does not finish: one line.

A config error (or a model that cannot be had here) is one line (conf/claim.py removes the folder
Hydra made for a run refused before it wrote anything); a Ctrl-C says in one line what the run kept
and how to go on from it.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from conf.errors import config_error_line
from core.model_cache import ModelUnavailableError
from core.rundir import RUN_JSON, read_mapping, stage_records


def refusal_line(err: BaseException) -> str | None:
    """The one line a run refused before it starts ends with (a config error, a model that cannot be had
    here: no network, no cache), or None for an error whose traceback is worth reading.

    >>> refusal_line(ModelUnavailableError("model.id='x': the Hugging Face hub is unreachable"))
    "model unavailable: model.id='x': the Hugging Face hub is unreachable"
    >>> refusal_line(ValueError("a bug")) is None
    True
    """
    line = config_error_line(err)
    if line is not None:
        return f"config error: {line}"
    if isinstance(err, ModelUnavailableError):
        return f"model unavailable: {err}"
    return None


def interrupted_line(run_dir: Path, overrides: Sequence[str]) -> str:
    """The one line a Ctrl-C ends with: what is kept in `run_dir` and the command that resumes it.

    >>> interrupted_line(Path("/nonexistent/run"), ["+curriculum=kk_ladder"])
    'interrupted: nothing kept (the run had not started); /nonexistent/run'
    """
    stages = stage_records(read_mapping(run_dir / RUN_JSON)) if (run_dir / RUN_JSON).exists() else []
    if not stages:
        return f"interrupted: nothing kept (the run had not started); {run_dir}"
    done = [s for s in stages if s.done]
    finals = ", ".join(s.name for s in stages if s.checkpoint and (run_dir / s.checkpoint).is_dir()) or "none"
    args = [a for a in overrides if not a.startswith(("resume=", "hydra."))]
    resume = shlex.join(["python", "-m", "train", *args, f"resume={run_dir}"])
    return (f"interrupted: kept {run_dir} ({len(done)}/{len(stages)} stages done; finals: {finals}; "
            f"run.json, metrics and validation so far); go on with: {resume}")
