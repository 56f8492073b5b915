"""Where numbers go beyond the run folder: wandb when `logger=wandb`, nothing with `logger=none`. `logger.mode: auto`
decides online or offline before wandb is asked: told `online` without network, wandb stalls, then raises.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from urllib.parse import urlsplit

from core.checks import is_number

log = logging.getLogger(__name__)

# WANDB_MODE's values wandb knows ("dryrun" is its old name for offline, "run" for online)
WANDB_MODES = ("online", "offline", "disabled", "dryrun", "shared", "run")
OFFLINE_MODES = ("offline", "dryrun")
WANDB_HOST = "https://api.wandb.ai"
# A server that answers opens a TCP connection in well under a second; a machine without network never does.
PROBE_TIMEOUT_S = 3.0
# The text a row may carry to wandb beside its numbers: the stage kind of a training row (grpo, sft)
TEXT_KEYS = ("stage_kind",)


class TrackerStartError(RuntimeError):
    """wandb could not start its run: the run ends failed, never left running with no one writing it."""


def host_answers(base_url: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the wandb server at `base_url` accepts a TCP connection within `timeout` seconds."""
    parts = urlsplit(base_url)
    if not parts.hostname:
        return False
    try:
        port = parts.port or (80 if parts.scheme == "http" else 443)
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            return True
    except (OSError, ValueError):  # refused, unreachable, timed out, no DNS; a port that is not a number
        return False


def wandb_mode(mode: str, env: Mapping[str, str], answers: Callable[[str], bool] = host_answers) -> str:
    """The mode wandb.init is given for `logger.mode` `mode`: `auto` follows WANDB_MODE where set, else offline
    without WANDB_API_KEY, else online when the wandb host answers (`answers`), else offline, saying why."""
    mode = str(mode)  # the schema's WandbMode is a str enum: wandb is given its plain name
    if mode != "auto":
        return mode
    asked = env.get("WANDB_MODE", "").strip().lower()
    if asked:
        if asked not in WANDB_MODES:
            raise TrackerStartError(f"WANDB_MODE={asked!r} is not one of {', '.join(WANDB_MODES)} (logger.mode: "
                                    "auto follows it)")
        return asked
    if not env.get("WANDB_API_KEY"):
        return "offline"
    host = env.get("WANDB_BASE_URL") or WANDB_HOST
    if answers(host):
        return "online"
    log.warning("wandb: offline: %s did not answer in %.0f s (logger.mode: auto, WANDB_API_KEY set); "
                "sync later with `wandb sync <run>/wandb/offline-run-*`", host, PROBE_TIMEOUT_S)
    return "offline"


class NullTracker:
    """The tracker of `logger=none`: accepts everything (`log`, `table`, `summary`, `finish`), sends nothing."""

    offline_folder: Path | None = None

    def _ignore(self, *args, **kwargs) -> None:
        pass

    log = table = summary = finish = _ignore


class WandbTracker:
    """A wandb run in `wandb_mode`'s mode; offline, `offline_folder` is its own folder (what `wandb sync` uploads)."""

    def __init__(self, logger: Mapping, run_dir: Path, *, name: str, group: str | None, job_type: str, run_id: str,
                 config: dict):
        import wandb

        mode = wandb_mode(logger.get("mode", "auto"), os.environ)
        self.wandb = wandb
        self.run = _start_run(
            wandb,
            project=logger["project"],
            entity=logger.get("entity"),
            name=name,
            group=group,
            job_type=job_type,
            id=run_id,
            resume="allow",
            dir=str(run_dir),
            mode=mode,
            tags=list(logger.get("tags") or []),
            config=config,
            # no ~30-line history panel at the end of every run; where the run is and how to sync it still show
            settings=wandb.Settings(quiet=True),
        )
        # training panels over the global step, validation panels over the stage; the stage's kind as text
        for metric in ("global_step", "stage", "stage_kind"):
            self.run.define_metric(metric, hidden=True)
        for prefix in ("train", "sft", "guard", "val_step", "rollouts"):
            self.run.define_metric(f"{prefix}/*", step_metric="global_step")
        self.run.define_metric("val/*", step_metric="stage")
        self.offline_folder = Path(self.run.settings.sync_dir) if mode in OFFLINE_MODES else None

    def log(self, row: dict, step: int) -> None:
        """The row's numbers (and its text metadata, `TEXT_KEYS`) at `step`."""
        kept = {k: v for k, v in row.items() if is_number(v) or (k in TEXT_KEYS and isinstance(v, str))}
        self.run.log({**kept, "global_step": step}, step=step)

    def table(self, key: str, rows: list[dict], step: int) -> None:
        """`rows` (dicts of the same keys) as a wandb table under `key`; nested values as JSON text."""
        if not rows:
            return
        columns = list(rows[0])
        data = [[_cell(row.get(c)) for c in columns] for row in rows]
        self.run.log({key: self.wandb.Table(columns=columns, data=data), "global_step": step}, step=step)

    def summary(self, values: dict) -> None:
        self.run.summary.update(values)

    def finish(self) -> None:
        self.run.finish()


def _start_run(wandb, **init):
    """wandb.init(**init), its failure as one line naming the mode and how to run without the server."""
    try:
        return wandb.init(**init)
    except Exception as err:
        first = (str(err).strip().splitlines() or [""])[0]
        raise TrackerStartError(f"logger: wandb.init failed in mode {init['mode']!r} ({type(err).__name__}: {first});"
                                " WANDB_MODE=offline or logger.mode=offline runs without wandb's server") from err


def _cell(value):
    """A table cell wandb takes: numbers, text and bools as they are, anything else as JSON text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value)


def open_tracker(logger: Mapping, run_dir: Path, *, name: str, group: str | None, job_type: str, run_id: str,
                 config: dict, writes: bool = True):
    """The tracker the logger group `logger` names, writing into `run_dir`; a NullTracker where not `writes`."""
    backend = logger.get("backend", "none")
    if backend == "wandb" and writes:
        return WandbTracker(logger, run_dir, name=name, group=group, job_type=job_type, run_id=run_id, config=config)
    if backend in ("none", "wandb"):
        return NullTracker()
    raise ValueError(f"logger.backend: {backend!r} is not one of wandb, none")
