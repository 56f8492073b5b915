"""The stored study behind `stored_optuna.StoredOptunaSweeper`; named "_" so Hydra's plugin scan, which imports
every other module under hydra_plugins on each app start, leaves it (and optuna, ~3 s) alone until a sweep runs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import optuna
from hydra.core.utils import JobStatus
from hydra_plugins.hydra_optuna_sweeper._impl import OptunaSweeperImpl, create_params_from_overrides
from optuna.distributions import CategoricalDistribution, distribution_to_json, json_to_distribution
from optuna.trial import TrialState
from sqlalchemy.exc import SQLAlchemyError

from conf.sweep_end import job_folders
from core.checks import ConfigError
from core.rundir.files import RUN_JSON, OutsideRunError, RunLock, RunLockedError

log = logging.getLogger(__name__)

SQLITE = "sqlite:///"
SEARCH_SPACE = "search_space"  # the study's user attribute: the space it was started over (space_json)
SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file


def check_study_file(storage: str) -> None:
    """Refuse a SQLite study file that is empty (SQLite would start afresh in it) or not SQLite."""
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


def check_trial_count(n_trials) -> None:
    """`hydra.sweeper.n_trials`: the trials the study holds in all, at least 1 (0 fails in optuna)."""
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise ConfigError(f"hydra.sweeper.n_trials: {n_trials!r} is not a number of trials >= 1 (the trials the "
                          "study holds in all, those finished counted)")


def space_json(space: dict) -> dict[str, str]:
    """A search space (name: optuna distribution) as the study records it."""
    return {name: distribution_to_json(d) for name, d in sorted(space.items())}


def check_search_space(study: optuna.Study, space: dict, sweep_dir: Path) -> None:
    """Refuse (ConfigError) to go on with a stored study over another search space than `space` (optuna's own check
    fails mid-sweep, leaving a trial running); without a recorded space, its trials' is compared."""
    recorded = study.user_attrs.get(SEARCH_SPACE)
    if recorded is None:
        seen = {}
        for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL,
                                                               TrialState.PRUNED)):
            seen.update(trial.distributions)  # a trial left running may hold another sweep's half-suggested space
        recorded = space_json(seen) if seen else None
    if recorded is None:
        return
    new = space_json(space)
    for name in sorted(recorded.keys() | new.keys()):
        if recorded.get(name) != new.get(name):
            was = _shown(recorded.get(name)) or "not searched"
            now = _shown(new.get(name)) or "not searched"
            raise ConfigError(f"{sweep_dir}: study {study.study_name!r} searches {name} over {was}, this sweep over "
                              f"{now}: resume it with the search space it started with (hydra.sweeper.params), or "
                              "start the sweep in a new folder (hydra.sweep.dir)")


def _shown(recorded: str | None) -> str | None:
    """A recorded distribution as its range: interval(0.0, 1.0), choice(0.0, 0.5)."""
    if recorded is None:
        return None
    d = json_to_distribution(recorded)
    if isinstance(d, CategoricalDistribution):
        return f"choice({', '.join(map(str, d.choices))})"
    low, high = getattr(d, "low", None), getattr(d, "high", None)
    kind = "int" if "Int" in type(d).__name__ else "interval"  # optuna 2's IntUniformDistribution, 3's IntDistribution
    log_scale = ", log" if getattr(d, "log", False) or "Log" in type(d).__name__ else ""
    return f"{kind}({low}, {high}{log_scale})"


class StoredSweeperImpl(OptunaSweeperImpl):
    """OptunaSweeperImpl whose trials run in the job folder of their number and whose study resumes to `n_trials`."""

    def sweep(self, arguments: list[str]) -> None:
        check_trial_count(self.n_trials)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        space, fixed = self.search_space_of(arguments)
        study = self.open_study(sweep_dir, space)
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            folder = sweep_dir / str(trial.number)
            if folder.is_dir() and set(space) <= set(trial.params):
                self.resume_killed(study, trial, folder, fixed)
            else:  # asked but never launched (the sweep stopped between the two): nothing to resume
                log.warning("trial %d was left running by a sweep that stopped before its job started (no folder %s, "
                            "or not all its parameters suggested): marked failed", trial.number, folder)
                study.tell(trial.number, state=TrialState.FAIL)
        finished = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL,
                                                                  TrialState.PRUNED)))
        if finished:
            log.info("study %s: %d of n_trials=%d trials finished; running %d more", self.study_name, finished,
                     self.n_trials, max(self.n_trials - finished, 0))
            if hasattr(self.sampler, "reseed_rng"):
                self.sampler.reseed_rng()
        self.n_trials = max(self.n_trials - finished, 0)
        super().sweep(arguments)

    def search_space_of(self, arguments: list[str]) -> tuple[dict, dict]:
        """This sweep's distributions by name and the command line's fixed values, as the parent finds them."""
        self._process_searchspace_config()
        params = [*self._parse_sweeper_params_config(), *arguments]
        ranges, fixed = create_params_from_overrides(params)
        space = {**(self.search_space_distributions or {}), **ranges}
        return {name: d for name, d in space.items() if name not in fixed}, fixed

    def open_study(self, sweep_dir: Path, space: dict | None = None) -> optuna.Study:
        """The stored study (created when new); refused when the sweep folder holds job folders but no study of
        this name (they would be numbered over), or the study searches another space than `space`."""
        check_study_file(str(self.storage))
        try:
            known = [s.study_name for s in optuna.get_all_study_summaries(self.storage)]
            jobs = [int(folder.name) for folder in job_folders(sweep_dir)]
            if jobs and self.study_name not in known:
                raise ConfigError(f"{sweep_dir}: holds job folders {jobs[0]}..{jobs[-1]} but its storage "
                                  f"({self.storage}) holds no study {self.study_name!r}: the sweep's study is lost; "
                                  "restore it, or start the sweep in a new folder (hydra.sweep.dir)")
            if space is not None and self.study_name in known:
                check_search_space(optuna.load_study(study_name=self.study_name, storage=self.storage), space,
                                   sweep_dir)
            study = optuna.create_study(study_name=self.study_name, storage=self.storage, sampler=self.sampler,
                                        directions=self._get_directions(), load_if_exists=True)
            if space is not None and SEARCH_SPACE not in study.user_attrs:
                study.set_user_attr(SEARCH_SPACE, space_json(space))
            return study
        except SQLAlchemyError as err:
            cause = getattr(err, "orig", None) or err  # the database's own words, without SQLAlchemy's statement
            raise ConfigError(f"{self.storage}: not a readable study ({str(cause).splitlines()[0]}); "
                              "restore it, or start the sweep in a new folder (hydra.sweep.dir)") from None

    def resume_killed(self, study: optuna.Study, trial: optuna.trial.FrozenTrial, folder: Path,
                      fixed: dict | None = None) -> None:
        """Run a trial a killed sweep left running again in its own folder (its run resumed), and tell the study how
        it ended; `fixed`: this command line's fixed values, under the trial's own."""
        if live_job(folder):
            raise ConfigError(f"{folder}: trial {trial.number} of study {self.study_name!r} is running in another "
                              "process (it holds the run's lock); wait for that sweep to end before resuming")
        resumed = (folder / RUN_JSON).is_file()
        log.warning("trial %d (job %s) was left running by a sweep that was killed: %s", trial.number, folder,
                    "resuming its run in its own folder" if resumed else "running it again in its own folder")
        # its suggested values and the command line's fixed ones
        params = {**(fixed or {}), **trial.user_attrs, **trial.params}
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
