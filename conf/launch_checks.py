"""How a job starts its processes (`launch.*`), and a multirun under `torchrun` or `accelerate launch`:
checked by a Hydra callback (`LaunchCheck`, conf/hydra/default.yaml) before the run or the sweep starts.

A multirun under a launcher: every rank runs `python -m train -m ...` from the top, so every rank runs the
sweeper and the launcher the config names. Hydra's basic sweeper and launcher are deterministic and run each
job in this process: every rank expands the same job list and the ranks train each job together, into one
job folder (tests/engines/test_distributed.py runs such a sweep). Any other is one sweep per rank: Optuna's sampler
would ask its one study for trials on every rank, each rank then training its own trials alone; joblib's
workers, started by each rank, would inherit the rank's place in a process group the rank already holds;
submitit would submit every job once per rank. Those are refused in one line, with the way that works: the
sweep started as one process, each of its jobs starting its own ranks (`launch=`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from conf import CONF_DIR
from conf.ranges import check_field_ranges
from core.checks import ConfigError
from core.distributed import launched_world_size

# What Hydra's own basic sweeper and launcher are (`_target_`), the ones every rank can run in step
BASIC = {"sweeper": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
         "launcher": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}


def accelerate_file(launch: Mapping) -> Path:
    """The accelerate launch file `launch.accelerate_config` names."""
    return CONF_DIR / "accelerate" / f"{launch['accelerate_config']}.yaml"


def check_launch(launch: Mapping) -> None:
    """`launch.*` values a job can start processes with (and claim GPUs for): the schema's ranges (conf/schema.py
    LaunchConfig), then the rules across its keys; ConfigError naming the key.

    >>> check_launch({"launcher": "torchrun", "processes": 0, "accelerate_config": "ddp", "gpus": None})
    Traceback (most recent call last):
    core.checks.ConfigError: launch.processes: 0 is not a whole number > 0 (processes a job starts)
    """
    check_field_ranges({"launch": dict(launch)})
    processes, gpus = launch["processes"], launch.get("gpus")
    if launch["launcher"] == "python" and processes != 1:
        raise ConfigError(f"launch.processes: launch.launcher=python starts one process (got {processes}); "
                          "for more per job: launch.launcher=torchrun or accelerate")
    if launch["launcher"] == "accelerate" and not accelerate_file(launch).is_file():
        known = sorted(p.stem for p in (CONF_DIR / "accelerate").glob("*.yaml"))
        raise ConfigError(f"launch.accelerate_config: {launch['accelerate_config']!r} is not a launch file under "
                          f"conf/accelerate/ ({', '.join(known)})")
    if gpus is None:
        return
    if launch["launcher"] is None:
        raise ConfigError("launch.gpus: GPUs are shared out to jobs that start their own run (launch=per_gpu); "
                          "this process trains on what CUDA_VISIBLE_DEVICES shows it: drop launch.gpus, or set it")
    if not gpus:
        raise ConfigError("launch.gpus: no GPU to share out here (CUDA_VISIBLE_DEVICES hides them all, or is "
                          "unset and nvidia-smi lists none); name them (launch.gpus=[0,1]), or drop launch=per_gpu")
    if len(set(gpus)) != len(gpus) or len(gpus) < processes:
        raise ConfigError(f"launch.gpus: {list(gpus)} must name distinct GPUs, at least launch.processes "
                          f"({processes}) of them: a job claims that many")


def launched_sweep_problem(targets: Mapping[str, str], choices: Mapping[str, str | None],
                           world_size: int) -> str | None:
    """Why a multirun cannot run on each of `world_size` launched processes, or None.

    `targets`: the `_target_` of hydra.sweeper and hydra.launcher; `choices`: Hydra's runtime choices (named in
    the refusal as the user chose them).

    >>> optuna = {"sweeper": "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper",
    ...           "launcher": BASIC["launcher"]}
    >>> launched_sweep_problem(optuna, {"hydra/sweeper": "optuna"}, 1) is None  # one process: any sweep
    True
    >>> print(launched_sweep_problem(optuna, {"hydra/sweeper": "optuna"}, 2))  # doctest: +NORMALIZE_WHITESPACE
    hydra/sweeper=optuna: under torchrun or accelerate launch (2 processes) every rank runs this sweep and its
    sweeper, which would ask the study for trials on every rank, and each rank would train its own alone; start
    the sweep as one process (python -m train -m ...) and let each job start its ranks: launch=torchrun or
    launch=accelerate, launch.processes=2
    >>> launched_sweep_problem(BASIC, {"hydra/sweeper": "basic", "hydra/launcher": "basic"}, 2) is None
    True
    """
    if world_size <= 1:
        return None
    for part in ("sweeper", "launcher"):
        if targets[part] != BASIC[part]:
            choice = f"hydra/{part}={choices.get(f'hydra/{part}') or targets[part]}"
            what = ("would ask the study for trials on every rank, and each rank would train its own alone"
                    if part == "sweeper" else "would start every job once per rank")
            return (f"{choice}: under torchrun or accelerate launch ({world_size} processes) every rank runs this "
                    f"sweep and its {part}, which {what}; start the sweep as one process (python -m train -m ...) "
                    f"and let each job start its ranks: launch=torchrun or launch=accelerate, "
                    f"launch.processes={world_size}")
    return None


class LaunchCheck(Callback):
    """`check_launch` before a run or a sweep starts, and `launched_sweep_problem` before the sweeper is made.

    A callback's exception only becomes Hydra's warning, so a refusal ends the process here, as the app's line.
    """

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        _refuse_on(lambda: check_launch(OmegaConf.to_container(config.launch, resolve=True)))

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        targets = {part: str(config.hydra[part]._target_) for part in BASIC}
        problem = launched_sweep_problem(targets, dict(config.hydra.runtime.choices), launched_world_size())
        if problem is not None:
            raise SystemExit(f"config error: {problem}")
        _refuse_on(lambda: check_launch(OmegaConf.to_container(config.launch, resolve=True)))


def _refuse_on(check) -> None:
    try:
        check()
    except ConfigError as err:
        raise SystemExit(f"config error: {err}") from None
