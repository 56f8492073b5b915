"""Optuna's Hydra sweeper with its study kept where the sweep is, so that a sweep can be resumed to `n_trials`.

`+hparams_search=gsm8k_reward_optuna` stores the study in SQLite in the sweep folder; the same command again
continues it to `n_trials` in all: each trial runs in the job folder of its number, finished ones count, one a killed
sweep left running is resumed in its folder, and a damaged or mismatched study is refused in one line. A resumed
sampler is reseeded (else it would propose the first trials' points again).
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
