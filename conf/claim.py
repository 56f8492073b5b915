"""The run lock taken before Hydra writes into a run directory that already holds a run (a resume).

Hydra writes into the run directory before the task function runs: it sets up logging to append to
`__main__.log`, then records the invocation (`.hydra/resume-<time>/` for a resume). A second process
on a live run, refused only later by the run's own lock, would already have appended to the live
run's log and left its record there; on a read-only file system Hydra's logging setup fails first,
burying the cause. `ClaimRunDirectory` (a Hydra callback, conf/hydra/default.yaml) takes the run lock
at the start, before any of that, and holds it for the life of the process: a refusal, a link out of
the run, or a directory that cannot be written ends the process in one line naming the cause, having
written nothing. A fresh run directory (a new time stamp) has no other holder and is locked by the run.

The other way round, a fresh run refused by a config error that only a check after Hydra's start can
see (`eval.subsets=[2,9]`, a `model.id` path that does not exist) leaves no folder behind:
`discard_refused_run` removes what Hydra wrote for it.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import shutil
import time
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from core.distributed import broadcast, start_processes
from core.rundir.files import RUN_JSON, OutsideRunError, RunLock, RunLockedError


class ClaimRunDirectory(Callback):
    """Hold the run lock of a run directory being continued (`resume=`, or a `hydra.run.dir` holding run.json)."""

    def __init__(self) -> None:
        self.lock: RunLock | None = None

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        _note_missing_folders(Path(config.hydra.run.dir))
        # With many processes the main one claims the directory for all (and holds the run's lock later,
        # train/run/runner.py run_lock); every rank hears its refusal here, at the same point, and leaves.
        processes = start_processes()
        refusal = self._claim(Path(config.hydra.run.dir), config) if processes.is_main else None
        refusal = broadcast(refusal, processes)
        if refusal is not None:
            raise SystemExit(refusal)

    def _claim(self, directory: Path, config: DictConfig) -> str | None:
        """Take the lock of a run being continued; why not, or None (taken, or nothing to continue)."""
        if not (config.get("resume") or (directory / RUN_JSON).is_file()):
            return None
        try:
            self.lock = RunLock(directory).hold()
            atexit.register(self._let_go)  # a run refused inside (a config error) never reaches on_run_end
        except (RunLockedError, OutsideRunError) as err:
            return str(err)
        except OSError as err:  # the last line says why: "Read-only file system: <path>"
            return f"{directory}: the run directory cannot be written: {err.strerror}: {err.filename or directory}"
        return None

    def on_run_end(self, config: DictConfig, **kwargs) -> None:
        self._let_go()

    def _let_go(self) -> None:
        """Release the lock (and its owner file) once, whichever way the process ends."""
        if self.lock is not None:
            self.lock.__exit__(None, None, None)
            self.lock = None


# The folders above a run directory that did not exist before Hydra made it (`paths.output_dir/runs` on a first
# run): a refused run removes them too, if it left them empty, so that it leaves no folder at all.
_MISSING_ABOVE_RUN: list[Path] = []


def _note_missing_folders(run_dir: Path) -> None:
    _MISSING_ABOVE_RUN[:] = [folder for folder in run_dir.absolute().parents if not folder.exists()]


# What Hydra writes into a new run directory before the task function runs (besides its log)
_HYDRA_RECORD = frozenset({"config.yaml", "hydra.yaml", "overrides.yaml"})


def discard_refused_run(run_dir: Path, log_name: str) -> bool:
    """Remove a run directory that a refusal (a config error, a model that cannot be had) ended before its
    run began (no run.json): the record and the log (`log_name`) Hydra wrote for this invocation, the lock
    file, then the folder if that emptied it. False, touching nothing, for a directory holding a run or a
    `.hydra` of earlier invocations (a resume is left as it was).
    """
    hydra = run_dir / ".hydra"
    if (run_dir / RUN_JSON).exists() or hydra.is_symlink():
        return False
    if hydra.is_dir():
        if not {path.name for path in hydra.iterdir()} <= _HYDRA_RECORD:
            return False
        shutil.rmtree(hydra)
    for name in (log_name, "run.lock", "run.owner"):
        if not (run_dir / name).is_dir():
            (run_dir / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # not empty: it held something else before this run
        run_dir.rmdir()
        for folder in _MISSING_ABOVE_RUN:  # nearest first; stops at the first that holds something
            folder.rmdir()
    return True


class HeldResume:
    """What Hydra would write into a run being continued (`resume=`), held until the run accepts the resume: its
    log lines (Hydra's job log, `<job>.log`) and its record of this invocation (`.hydra/resume-<time>/`).

    A resume can still be refused after Hydra's start (another config, a model that cannot be had); refused, it
    leaves the run exactly as it was. `accept` writes the held lines and the record once the run goes on.
    Hydra is told to keep no record for a resume (conf/__init__.py hydra_subdir); an explicit
    `hydra.output_subdir=null` (a job's run started by train/launch/relaunch.py) keeps it off here too.
    """

    def __init__(self, run_dir: Path, hydra_cfg: DictConfig, task_cfg: DictConfig) -> None:
        self.run_dir, self.hydra_cfg, self.task_cfg = run_dir, hydra_cfg, task_cfg
        self.started = time.strftime("%Y-%m-%d_%H-%M-%S")
        self.held = _HeldLines()
        root = logging.getLogger()
        self.files = [handler for handler in root.handlers if isinstance(handler, logging.FileHandler)
                      and Path(handler.baseFilename).is_relative_to(run_dir.absolute())]
        for handler in self.files:
            root.removeHandler(handler)
        if self.files:
            root.addHandler(self.held)

    def accept(self) -> None:
        """The resume goes on: the held lines into the run's log, then this invocation's record beside the run's."""
        root = logging.getLogger()
        root.removeHandler(self.held)
        for handler in self.files:
            for record in self.held.records:
                handler.handle(record)
            root.addHandler(handler)
        self.files, self.held.records = [], []
        if not record_asked_off(self.hydra_cfg) and self.hydra_cfg.output_subdir is None:
            record = self.run_dir / ".hydra" / f"resume-{self.started}"
            record.mkdir(parents=True, exist_ok=True)
            OmegaConf.save(self.task_cfg, record / "config.yaml")
            OmegaConf.save(OmegaConf.create({"hydra": self.hydra_cfg}), record / "hydra.yaml")
            OmegaConf.save(OmegaConf.create(list(self.hydra_cfg.overrides.task)), record / "overrides.yaml")


class _HeldLines(logging.Handler):
    """Keeps the records it is handed, to be written (or dropped) once it is known where they belong."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def record_asked_off(hydra_cfg: DictConfig) -> bool:
    """Whether the command line told Hydra to keep no record (`hydra.output_subdir=null`)."""
    return any(override.replace(" ", "") == "hydra.output_subdir=null" for override in hydra_cfg.overrides.hydra)
