"""`python -m train +curriculum=kk_ladder [overrides]`: the Hydra entry point.

Thin on purpose: compose the config, find the run directory, hand over to `run_curriculum`. A config
error, from Hydra's composition or from our checks, ends it as one `config error:` line (conf/errors.py).
The return value is the sweep objective (Optuna reads it); in a multirun a failed job records
its error in `error.txt` of its own directory, returns NaN, and the sweep goes on. A run refused
by the run lock writes nothing: the directory belongs to the live run. A fresh run refused by a
config error leaves no folder (conf/claim.py).
"""

from __future__ import annotations

import logging
import traceback
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from conf import register_resolvers
from conf.claim import discard_refused_run
from conf.errors import exit_on_config_error, run_app
from core.confined import write_text_regular
from core.rundir import ERROR, RunLockedError

log = logging.getLogger("train")
register_resolvers()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    # imported here, not above: a config error is refused in a second, before torch and TRL load
    from core.models import quiet_libraries
    from train.runner import run_curriculum

    quiet_libraries()
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    multirun = HydraConfig.get().mode.name == "MULTIRUN"
    error_file = run_dir / ERROR  # the one write into the run directory outside run_curriculum
    try:
        value = run_curriculum(cfg, run_dir)
    except RunLockedError as err:  # the directory belongs to a live run: write nothing into it
        raise SystemExit(str(err)) from None
    except Exception as err:
        if multirun or not discard_refused_run(run_dir, err, f"{HydraConfig.get().job.name}.log"):
            write_text_regular(error_file, traceback.format_exc())
        if not multirun:
            exit_on_config_error(err)  # one line that names the key; a traceback would bury it
            raise
        log.error("job %s failed (%s); see %s", run_dir.name, err, error_file)
        return float("nan")  # a sweeper records the trial as failed and goes on
    error_file.unlink(missing_ok=True)  # a failed job, resumed to the end, is no longer failed
    return value


if __name__ == "__main__":
    run_app(main)
