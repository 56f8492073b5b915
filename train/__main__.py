"""`python -m train +curriculum=kk_ladder [overrides]`: the Hydra entry point.

Thin on purpose: compose the config, find the run directory, hand over to `run_curriculum`. A config
error, from Hydra's composition or from our checks, ends it as one `config error:` line (conf/errors.py).
The return value is the sweep objective (Optuna reads it); in a multirun a failed job records
its error in `error.txt` of its own directory, returns NaN, and the sweep goes on. A run refused
by the run lock writes nothing: the directory belongs to the live run. A single run refused by a config
error before it wrote anything leaves no folder; a Ctrl-C ends with one line (train/exits.py).
"""

from __future__ import annotations

import logging
import sys
import traceback
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from conf import register_resolvers
from conf.errors import run_app
from core.rundir import ERROR, RunLockedError
from train.exits import interrupted_line, refusal_line, remove_unused_run_dir
from train.identity import requested_optimizers, run_identity

log = logging.getLogger("train")
register_resolvers()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    # imported here, not above: a config error is refused in a second, before torch and TRL load
    from core.models import defer_bitsandbytes, quiet_libraries

    defer_bitsandbytes(requested_optimizers(cfg))  # before transformers.trainer (-> peft) imports it
    from train.runner import run_curriculum

    quiet_libraries()
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode.name == "MULTIRUN"
    error_file = run_dir / ERROR  # the one write into the run directory outside run_curriculum
    try:
        value = run_curriculum(cfg, run_dir, identity=run_identity(hydra_cfg, run_dir))
    except RunLockedError as err:  # the directory belongs to a live run: write nothing into it
        raise SystemExit(str(err)) from None
    except KeyboardInterrupt:
        print(interrupted_line(run_dir, list(hydra_cfg.overrides.task)), file=sys.stderr)
        raise SystemExit(130) from None  # the shell's code for a Ctrl-C
    except Exception as err:
        refusal = refusal_line(err)
        if not multirun and refusal is not None:
            # one line that names the key; a traceback would bury it. A folder Hydra made for a run refused
            # before it wrote anything goes; a run given to resume= is left exactly as it was (no error.txt)
            remove_unused_run_dir(run_dir)
            raise SystemExit(refusal) from None
        error_file.write_text(traceback.format_exc())
        if not multirun:
            raise
        log.error("job %s failed (%s); see %s", run_dir.name, err, error_file)
        return float("nan")  # a sweeper records the trial as failed and goes on
    error_file.unlink(missing_ok=True)  # a failed job, resumed to the end, is no longer failed
    return value


if __name__ == "__main__":
    run_app(main)
