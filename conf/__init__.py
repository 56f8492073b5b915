"""The Hydra config root (importable: tests and other apps compose the same files; importing it registers the
resolvers, also on a submitit cluster node), and the run directory as Hydra is let write into it: Hydra writes there
before the task function runs, so `ClaimRunDirectory` locks a run being continued first, `HeldResume` holds what
Hydra would write into a resumed run until it is accepted, and `discard_refused_run` removes a refused fresh run's.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import shutil
import time
from datetime import datetime
from functools import partial
from pathlib import Path

from hydra.core.config_store import ConfigStore
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from conf.schema import RootConfig
from core.checks import ConfigError
from core.distributed import broadcast, start_processes
from core.gpu_pool import jobs_at_once, visible_gpus
from core.rundir.files import RUN_JSON, OutsideRunError, RunLock, RunLockedError

CONF_DIR = Path(__file__).resolve().parent
# The root schema config.yaml's defaults list starts from, stored on import: whatever composes the files types alike
ConfigStore.instance().store(name="base_config", node=RootConfig)


def run_dir(resume: str | None, fresh: str) -> str:
    """`resume` when set, checked to be a run directory before Hydra creates and writes the folder; else `fresh`."""
    if not resume:
        return fresh
    if not (Path(resume) / RUN_JSON).is_file():
        state = "is not a run directory" if Path(resume).is_dir() else "does not exist"
        raise ConfigError(f"resume={resume}: {state}; a run directory holds run.json (with config.yaml, "
                          "metrics.jsonl and stages/). Give the folder of the run to continue, or drop resume= "
                          "to start a new run.")
    return resume


def hydra_subdir(resume: str | None) -> str | None:
    """Where Hydra records this invocation: `.hydra` for a new run; for a resume `HeldResume` writes it later."""
    return None if resume else ".hydra"


def share(part, whole) -> float:
    """`part / whole`, rounded: a memory share such as vLLM's `${kk_share:${gpu.vllm_gb},${gpu.memory_gb}}`.

    >>> share(7, 24)
    0.292
    """
    return round(float(part) / float(whole), 3)


def source_when(offline, offline_source: str, online_source: str) -> str:
    """A task's source under `offline` (experiment=smoke sets it): the offline one, else the online one.

    >>> source_when(True, "sample", "hub"), source_when(False, "sample", "hub")
    ('sample', 'hub')
    """
    return offline_source if offline else online_source


def launch_time(pattern: str, launched: float | None = None) -> str:
    """The launch's start time (`launched`, seconds since the epoch; None: now) formatted by `pattern`.

    >>> launch_time("%Y", launched=0.0) in ("1969", "1970")
    True
    """
    return datetime.fromtimestamp(time.time() if launched is None else launched).strftime(pattern)


def register_resolvers(launched: float | None = None) -> None:
    """Register the resolvers the configs use (`kk_*`). `kk_now` stands in for Hydra's `now`: every rank is handed
    the main process's `launched`, so all name the same folder; cached, so a sweep's jobs resolve its launch time."""
    OmegaConf.register_new_resolver("kk_run_dir", run_dir, replace=True)
    OmegaConf.register_new_resolver("kk_hydra_subdir", hydra_subdir, replace=True)
    OmegaConf.register_new_resolver("kk_share", share, replace=True)
    OmegaConf.register_new_resolver("kk_source_when", source_when, replace=True)
    OmegaConf.register_new_resolver("kk_now", partial(launch_time, launched=launched), replace=True, use_cache=True)
    # launch=per_gpu: the GPUs its jobs share, read without CUDA, and how many jobs run at once on them
    OmegaConf.register_new_resolver("kk_visible_gpus", visible_gpus, replace=True, use_cache=True)
    OmegaConf.register_new_resolver("kk_jobs_at_once", jobs_at_once, replace=True)


# The folders above a run directory Hydra made: a refused run removes them too where it left them empty
_MISSING_ABOVE_RUN: list[Path] = []


class ClaimRunDirectory(Callback):
    """Hold the run lock of a run directory being continued (`resume=`, or a `hydra.run.dir` holding run.json)."""

    lock: RunLock | None = None

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        directory = Path(config.hydra.run.dir)
        _MISSING_ABOVE_RUN[:] = [folder for folder in directory.absolute().parents if not folder.exists()]
        # the main process claims the directory for all ranks; every rank hears its refusal here and leaves
        processes, refusal = start_processes(), None
        if processes.is_main and (config.get("resume") or (directory / RUN_JSON).is_file()):
            try:
                self.lock = RunLock(directory).hold()
                atexit.register(self.on_run_end)  # a run refused inside (a config error) never reaches on_run_end
            except (RunLockedError, OutsideRunError) as err:
                refusal = str(err)
            except OSError as err:  # the last line says why: "Read-only file system: <path>"
                refusal = (f"{directory}: the run directory cannot be written: {err.strerror}: "
                           f"{err.filename or directory}")
        refusal = broadcast(refusal, processes)
        if refusal is not None:
            raise SystemExit(refusal)

    def on_run_end(self, config: DictConfig | None = None, **kwargs) -> None:
        """Release the lock (and its owner file) once, whichever way the process ends."""
        if self.lock is not None:
            self.lock.__exit__(None, None, None)
            self.lock = None


# What Hydra writes into a new run directory before the task function runs (besides its log)
_HYDRA_RECORD = frozenset({"config.yaml", "hydra.yaml", "overrides.yaml"})


def discard_refused_run(run_dir: Path, log_name: str) -> bool:
    """Remove what Hydra wrote for a run refused before it began (no run.json); False, touching nothing, else."""
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
    """What Hydra would write into a resumed run, held until `accept`: a refused resume leaves it as it was."""

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


register_resolvers()
