"""Optuna's Hydra sweeper with its study kept where the sweep is, so that a sweep can be resumed.

`+hparams_search=gsm8k_reward_optuna` stores the study in SQLite in the sweep folder
(`storage: sqlite:///${hydra.sweep.dir}/optuna.db`). Two things stop the plain sweeper from resuming
it: SQLite opens its file before the launcher makes the sweep folder, and a new invocation numbers its
jobs from 0 again, into the folders of the trials already run. This sweeper makes the folder and
numbers the new jobs on from the highest job folder there (a trial's folder is never reused). A resumed
sampler is reseeded (optuna's `reseed_rng`): seeded as at the start, it would propose the first trials'
points again; so a resumed sweep's new points are not those an uninterrupted sweep would have tried.
"""

from __future__ import annotations

from pathlib import Path

from hydra.types import HydraContext, TaskFunction
from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper
from omegaconf import DictConfig


def next_job(sweep_dir: Path) -> int:
    """The number after the highest job folder (`<sweep>/<n>/`) of a sweep folder; 0 for none.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = [(Path(d) / name).mkdir() for name in ("0", "1", "7", ".hydra")]
    ...     next_job(Path(d)), next_job(Path(d) / "none")
    (8, 0)
    """
    numbers = [int(p.name) for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()] \
        if sweep_dir.is_dir() else []
    return max(numbers, default=-1) + 1


class StoredOptunaSweeper(OptunaSweeper):
    """OptunaSweeper whose study lives in the sweep folder and resumes there (module docstring)."""

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        sweep_dir = Path(str(config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)  # the study's SQLite file is opened before any job runs
        self.sweeper.job_idx = next_job(sweep_dir)
        if self.sweeper.job_idx and hasattr(self.sweeper.sampler, "reseed_rng"):
            self.sweeper.sampler.reseed_rng()
