"""Optuna's Hydra sweeper with its study kept where the sweep is, so that a sweep can be resumed to `n_trials`.

`+hparams_search=gsm8k_reward_optuna` stores the study in SQLite in the sweep folder
(`storage: sqlite:///${hydra.sweep.dir}/optuna.db`). Running the same command with that folder again
continues the study to `n_trials` trials in all:
- every trial runs in the job folder of its number (`<sweep>/<trial>`), so a trial and its folder name each other;
- the trials already finished count (complete or failed); a trial left running by a sweep that was killed is
  resumed in its own folder (the run's own `resume=`: a stage killed mid-way continues from its last
  checkpoint), named in the log, and its result told to the study; one whose folder a live process holds
  (another sweep on the same study) stops the resume, naming it;
- a trial left running by a sweep that stopped before its job started (no job folder, or not every parameter
  suggested) is marked failed, whatever stopped it: resumed, it would run without the command line's values;
- a study file that is empty, not SQLite, or truncated, and a sweep folder whose job folders have no study
  in it, are refused in one line naming the file: each would otherwise start a new study over the old jobs;
- a study resumed over another search space (hydra.sweeper.params: a parameter added, dropped, or given another
  range) is refused in one line naming the parameter, before the study is touched: the study records the space it
  started over (its user attribute `search_space`; an older study, the space of its finished trials);
- `n_trials` below 1 is refused in one line.
SQLite opens its file before the launcher makes the sweep folder, so this sweeper makes it. A resumed sampler
is reseeded (optuna's `reseed_rng`): seeded as at the start, it would propose the first trials' points again;
so a resumed sweep's new points are not those an uninterrupted sweep would have tried.
"""

from __future__ import annotations

from pathlib import Path

from hydra.types import HydraContext, TaskFunction
from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper
from omegaconf import DictConfig


class StoredOptunaSweeper(OptunaSweeper):
    """OptunaSweeper whose study lives in the sweep folder and resumes there (module docstring)."""

    def __init__(self, **settings) -> None:  # the parent's __init__ only builds its impl: this one builds ours
        from hydra_plugins.kk_optuna_store._study import StoredSweeperImpl  # optuna: only when a sweep runs

        self.sweeper = StoredSweeperImpl(**settings)

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        Path(str(config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)  # SQLite opens its file before any job
