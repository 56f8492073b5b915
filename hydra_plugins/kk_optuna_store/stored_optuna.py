"""Optuna's Hydra sweeper with its study kept where the sweep is, so that a sweep can be resumed to `n_trials`.

`+hparams_search=gsm8k_reward_optuna` stores the study in SQLite in the sweep folder; the same command with that
folder again continues the study to `n_trials` trials in all:
- every trial runs in the job folder of its number (`<sweep>/<trial>`);
- finished trials count (complete or failed); one a killed sweep left running is resumed in its own folder (the
  run's `resume=`) and its result told to the study; one whose folder a live process holds stops the resume;
- one left running before its job started (no job folder, or not every parameter suggested) is marked failed;
- a study file that is empty, not SQLite or truncated, job folders with no study, a study over another search
  space (recorded as its user attribute `search_space`), and `n_trials` below 1 are each refused in one line.
A resumed sampler is reseeded (seeded as at the start, it would propose the first trials' points again), so its
new points are not those an uninterrupted sweep would have tried.
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
