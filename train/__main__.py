"""`python -m train +curriculum=kk_ladder [overrides]`: the Hydra entry point, thin on purpose: read the config into
checked settings and hand them to `run_curriculum`. A config error ends it as one line; a Ctrl-C with what was kept.
It returns the sweep objective (a failed multirun job: NaN, its error in its `error.txt`). Under a launcher every rank
runs it from the top, joining the process group before Hydra composes so all name the same time-named folder.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from conf import HeldResume, discard_refused_run, record_asked_off, register_resolvers
from conf.errors import run_app
from core.checks import ConfigError
from core.distributed import Processes, broadcast, gather, start_processes
from core.rundir.files import ERROR, RunLockedError
from core.stage_kinds import STAGE_KIND_FACTS
from train.failures import interrupted_line, record_error, record_refusal, refusal_line
from train.identity import RunIdentity, run_identity

log = logging.getLogger("train")

# What a rank other than the main one adds to its command line: no Hydra record in the run directory, a quiet console
QUIET_RANK = ["hydra.output_subdir=null", "hydra/job_logging=stdout", "hydra.job_logging.root.level=WARNING",
              "hydra/hydra_logging=disabled"]


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode.name == "MULTIRUN"
    processes = start_processes()
    # every rank's host and pid, so that a rank that loses another in a collective can say which one is gone
    peers = gather((os.uname().nodename, os.getpid()), processes)
    # a resume writes nothing into the run (its log lines, its record) until the run accepts it
    held = HeldResume(run_dir, hydra_cfg, cfg) if cfg.resume and processes.is_main else None
    accepted = held.accept if held is not None else lambda: None
    try:
        if cfg.launch.launcher is not None:
            accepted()  # the job's run refuses (or accepts) the resume in its own processes
            sweep_dir = Path(hydra_cfg.sweep.dir) if multirun else run_dir  # where a sweep's jobs share GPUs
            value = _relaunch(cfg.launch, list(hydra_cfg.overrides.task), run_dir, sweep_dir, processes)
        else:
            value = _train(cfg, run_dir, processes, run_identity(hydra_cfg, run_dir), accepted)
    except RunLockedError as err:  # the directory belongs to a live run: write nothing into it
        raise SystemExit(str(err)) from None
    except KeyboardInterrupt:
        if processes.is_main:
            print(interrupted_line(run_dir, list(hydra_cfg.overrides.task)), file=sys.stderr)
        raise SystemExit(130) from None  # the shell's code for a Ctrl-C
    except Exception as err:
        refusal = refusal_line(err)
        if refusal is not None and not multirun:
            # one line that names the key; a traceback would bury it
            if processes.is_main:
                _leave_refused(run_dir, refusal, hydra_cfg)
            raise SystemExit(refusal) from None
        record_error(run_dir / ERROR, err, processes, peers)
        if not multirun:
            raise
        log.error("job %s failed (%s); see %s", run_dir.name, err, run_dir / ERROR)
        return float("nan")  # a sweeper records the trial as failed and goes on
    return value


def _leave_refused(run_dir: Path, refusal: str, hydra_cfg) -> None:
    """A refused run's folder goes (a resumed one stays as it was); a sweep job's keeps error.txt."""
    if record_asked_off(hydra_cfg):
        record_refusal(run_dir / ERROR, refusal)
    else:
        discard_refused_run(run_dir, f"{hydra_cfg.job.name}.log")


def _train(cfg: DictConfig, run_dir: Path, processes: Processes, identity: RunIdentity,
           accepted: Callable[[], None]) -> float:
    """This process trains (alone, or as one rank of a launch): the config checked, then the curriculum run."""
    # imported here: a config error is refused before torch and TRL load, and a launch= job never loads them
    from core.models import defer_bitsandbytes, defer_deepspeed, defer_vllm, quiet_libraries

    # every `optim` the config names: the kinds' groups, each stage's overrides and `stage_overrides`
    blocks = [*(cfg.get(kind) for kind in STAGE_KIND_FACTS),
              *(stage.get("overrides") for stage in OmegaConf.select(cfg, "curriculum.stages") or []),
              *(cfg.get("stage_overrides") or {}).values()]
    optims = {str(block.get("optim")) for block in blocks
              if block is not None and hasattr(block, "get") and block.get("optim") is not None}
    defer_bitsandbytes(optims)  # before transformers.trainer (-> peft) imports it
    defer_vllm(bool(OmegaConf.select(cfg, "grpo.use_vllm")))  # before trl imports it
    defer_deepspeed()  # before transformers imports it: only a DeepSpeed launch needs it
    from train.run.runner import run_curriculum
    from train.settings import read_settings

    quiet_libraries()
    settings = read_settings(cfg, processes)  # the config checked, read into typed records
    return run_curriculum(settings, run_dir, processes=processes, identity=identity, accepted=accepted)


def _relaunch(launch: DictConfig, overrides: list[str], run_dir: Path, sweep_dir: Path, processes: Processes) -> float:
    """The job starts its run's processes (`launch.launcher`), importing no torch; refused inside a launch."""
    from train.launch.relaunch import relaunch

    if processes.many:
        raise ConfigError(f"launch.launcher: this process is already one of {processes.world_size} ranks; "
                          "drop launch= when starting python -m train with accelerate launch or torchrun")
    return relaunch(OmegaConf.to_container(launch, resolve=True), overrides, run_dir, sweep_dir)


def _start() -> None:
    """Join the launch (many processes), share the main process's launch time, quiet the other ranks."""
    processes = start_processes()
    register_resolvers(launched=broadcast(time.time(), processes))
    if not processes.is_main:
        sys.argv.extend(QUIET_RANK)
        os.environ.setdefault("WANDB_SILENT", "true")


if __name__ == "__main__":
    _start()
    run_app(main)
