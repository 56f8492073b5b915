"""`python -m train +curriculum=kk_ladder [overrides]`: the Hydra entry point.

Thin on purpose: compose the config, find the run directory, hand over to `run_curriculum`.
The return value is the sweep objective (Optuna reads it); in a multirun a failed job records
its error in `error.txt` of its own directory, returns NaN, and the sweep goes on.
"""

from __future__ import annotations

import logging
import traceback
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from conf import register_resolvers
from curriculum.plan import ConfigError
from train.runner import run_curriculum

log = logging.getLogger("train")
register_resolvers()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    multirun = HydraConfig.get().mode.name == "MULTIRUN"
    try:
        return run_curriculum(cfg, run_dir)
    except Exception as err:
        (run_dir / "error.txt").write_text(traceback.format_exc())
        if not multirun:
            if isinstance(err, ConfigError):  # the message names the key; a traceback would bury it
                raise SystemExit(f"config error: {err}") from None
            raise
        log.error("job %s failed (%s); see %s", run_dir.name, err, run_dir / "error.txt")
        return float("nan")  # a sweeper records the trial as failed and goes on


if __name__ == "__main__":
    main()
