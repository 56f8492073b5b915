"""Optuna's Hydra sweeper with its study kept where the sweep is, so that a sweep can be resumed to `n_trials`.

`+hparams_search=gsm8k_reward_optuna` stores the study in SQLite in the sweep folder
(`storage: sqlite:///${hydra.sweep.dir}/optuna.db`). Running the same command with that folder again
continues the study to `n_trials` trials in all:
- every trial runs in the job folder of its number (`<sweep>/<trial>`), so a trial and its folder name each other;
- the trials already finished count (complete or failed); a trial left running by a sweep that was killed is
  resumed in its own folder (the run's own `resume=`: a stage killed mid-way continues from its last
  checkpoint), named in the log, and its result told to the study; one whose folder a live process holds
  (another sweep on the same study) stops the resume, naming it;
- a study file that is empty, not SQLite, or truncated, and a sweep folder whose job folders have no study
  in it, are refused in one line naming the file: each would otherwise start a new study over the old jobs.
SQLite opens its file before the launcher makes the sweep folder, so this sweeper makes it. A resumed sampler
is reseeded (optuna's `reseed_rng`): seeded as at the start, it would propose the first trials' points again;
so a resumed sweep's new points are not those an uninterrupted sweep would have tried.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import optuna
from hydra.core.utils import JobStatus
from hydra.types import HydraContext, TaskFunction
from hydra_plugins.hydra_optuna_sweeper._impl import OptunaSweeperImpl
from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper
from omegaconf import DictConfig
from optuna.trial import TrialState
from sqlalchemy.exc import SQLAlchemyError

from core.checks import ConfigError
from core.confined import OutsideRunError
from core.rundir import RUN_JSON
from core.runlock import RunLock, RunLockedError

log = logging.getLogger(__name__)

SQLITE = "sqlite:///"
SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file


def job_folders(sweep_dir: Path) -> list[int]:
    """The numbers of a sweep folder's job folders (`<sweep>/<n>/`), in order; [] for none.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = [(Path(d) / name).mkdir() for name in ("0", "1", "7", ".hydra")]
    ...     job_folders(Path(d)), job_folders(Path(d) / "none")
    ([0, 1, 7], [])
    """
    return sorted(int(p.name) for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()) \
        if sweep_dir.is_dir() else []


def check_study_file(storage: str) -> None:
    """Refuse a SQLite study file that is empty or not SQLite (SQLite would start an empty database in an empty
    file, and SQLAlchemy's error for the other never names the file); any other storage is optuna's."""
    if not storage.startswith(SQLITE):
        return
    path = Path(storage.removeprefix(SQLITE))
    if not path.exists():
        return
    with open(path, "rb") as fh:
        head = fh.read(len(SQLITE_HEADER))
    if not head:
        raise ConfigError(f"{path}: empty (0 bytes): the sweep's study is gone (a copy or a full disk?); restore it, "
                          "or start the sweep in a new folder (hydra.sweep.dir)")
    if head != SQLITE_HEADER:
        raise ConfigError(f"{path}: not an SQLite database (damaged or truncated); restore it, or start the sweep in "
                          "a new folder (hydra.sweep.dir)")


def live_job(folder: Path) -> bool:
    """Whether a live process holds the run in `folder` (its run lock): a trial running now, not a killed one."""
    if not (folder / "run.lock").exists():
        return False
    try:
        with RunLock(folder):
            return False
    except RunLockedError:
        return True
    except OutsideRunError:  # not live; its resumed run refuses the folder by name, and the trial fails
        return False


class StoredSweeperImpl(OptunaSweeperImpl):
    """OptunaSweeperImpl whose trials run in the job folder of their number and whose study resumes to `n_trials`."""

    def sweep(self, arguments: list[str]) -> None:
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        study = self.open_study(sweep_dir)
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            self.resume_killed(study, trial, sweep_dir / str(trial.number))
        finished = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL,
                                                                  TrialState.PRUNED)))
        if finished:
            log.info("study %s: %d of n_trials=%d trials finished; running %d more", self.study_name, finished,
                     self.n_trials, max(self.n_trials - finished, 0))
            if hasattr(self.sampler, "reseed_rng"):
                self.sampler.reseed_rng()
        self.n_trials = max(self.n_trials - finished, 0)
        super().sweep(arguments)

    def open_study(self, sweep_dir: Path) -> optuna.Study:
        """The stored study (created when new), its file checked first; refused when the sweep folder holds job
        folders but the storage no study of this name (they would be numbered over)."""
        check_study_file(str(self.storage))
        try:
            known = [s.study_name for s in optuna.get_all_study_summaries(self.storage)]
            jobs = job_folders(sweep_dir)
            if jobs and self.study_name not in known:
                raise ConfigError(f"{sweep_dir}: holds job folders {jobs[0]}..{jobs[-1]} but its storage "
                                  f"({self.storage}) holds no study {self.study_name!r}: the sweep's study is lost; "
                                  "restore it, or start the sweep in a new folder (hydra.sweep.dir)")
            return optuna.create_study(study_name=self.study_name, storage=self.storage, sampler=self.sampler,
                                       directions=self._get_directions(), load_if_exists=True)
        except SQLAlchemyError as err:
            cause = getattr(err, "orig", None) or err  # the database's own words, without SQLAlchemy's statement
            raise ConfigError(f"{self.storage}: not a readable study ({str(cause).splitlines()[0]}); "
                              "restore it, or start the sweep in a new folder (hydra.sweep.dir)") from None

    def resume_killed(self, study: optuna.Study, trial: optuna.trial.FrozenTrial, folder: Path) -> None:
        """Run a trial a killed sweep left running again in its own folder (continuing its run where it stopped),
        and tell the study how it ended."""
        if live_job(folder):
            raise ConfigError(f"{folder}: trial {trial.number} of study {self.study_name!r} is running in another "
                              "process (it holds the run's lock); wait for that sweep to end before resuming")
        resumed = (folder / RUN_JSON).is_file()
        log.warning("trial %d (job %s) was left running by a sweep that was killed: %s", trial.number, folder,
                    "resuming its run in its own folder" if resumed else "running it again in its own folder")
        params = {**trial.params, **trial.user_attrs}  # its suggested values and the command line's fixed ones
        overrides = [f"{name}={value}" for name, value in params.items()]
        [ret] = self.launcher.launch([[*overrides, *([f"resume={folder}"] if resumed else [])]],
                                     initial_job_idx=trial.number)
        try:
            value = float(ret.return_value) if ret.status == JobStatus.COMPLETED else None
        except (TypeError, ValueError):
            value = None
        study.tell(trial.number, value, state=TrialState.FAIL if value is None else TrialState.COMPLETE)

    def _configure_trials(self, trials: list, search_space_distributions: dict,
                          fixed_params: dict) -> Sequence[Sequence[str]]:
        """Each new trial's overrides, its job numbered as the trial (a batch's trials are numbered in a row)."""
        overrides = super()._configure_trials(trials, search_space_distributions, fixed_params)
        self.job_idx = trials[0].number
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        taken = [t.number for t in trials if (sweep_dir / str(t.number)).exists()]
        if taken:
            raise ConfigError(f"{sweep_dir / str(taken[0])}: a folder of another run is where trial {taken[0]} would "
                              "run; move it out of the sweep folder, or start the sweep in a new folder")
        return overrides


class StoredOptunaSweeper(OptunaSweeper):
    """OptunaSweeper whose study lives in the sweep folder and resumes there (module docstring)."""

    def __init__(self, **settings) -> None:  # the parent's __init__ only builds its impl: this one builds ours
        self.sweeper = StoredSweeperImpl(**settings)

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        Path(str(config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)  # SQLite opens its file before any job
