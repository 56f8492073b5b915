"""`launch=accelerate`: a Hydra job that starts its own processes, for a cluster job of many GPUs.

Hydra's submitit launcher runs one Hydra job per SLURM job, in one process. With
`launch=accelerate launch.processes=N` that job trains nothing itself: it starts `accelerate launch
--num_processes N -m train <the job's overrides> hydra.run.dir=<the job's directory>` (the launch file
`launch.accelerate_config` under conf/accelerate/), waits, and returns the objective its run.json
records. `launch=torchrun` does the same through torchrun (on this CPU, where `accelerate launch
--cpu` starts one process only: the tests' stand-in). The ranks write the run directory; the job
keeps its own Hydra record there (the ranks are told `hydra.output_subdir=null`).

A preempted or timed-out SLURM job is requeued by submitit (`max_num_timeout` > 0) and runs the same
job again: same overrides, same job directory. A run directory whose run.json holds the same config
continues where it stopped, so the requeued ranks resume the run. Before the job process exits
(finished, failed, or signalled for a requeue), it stops the ranks it started, so no rank of the old
attempt holds the run lock when the new one starts.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from conf import CONF_DIR
from core.checks import ConfigError, is_number
from core.rundir import ERROR, RUN_JSON, read_mapping

log = logging.getLogger(__name__)

LAUNCHERS = ("accelerate", "torchrun")
# How long the ranks get to stop on SIGTERM (a trainer checkpoint being written) before SIGKILL.
STOP_GRACE_S = 60


def check_launch(launch: Mapping) -> None:
    """`launch.*` values a job can start processes with; ConfigError naming the key otherwise.

    >>> check_launch({"launcher": "torchrun", "processes": 0, "accelerate_config": "ddp"})
    Traceback (most recent call last):
    core.checks.ConfigError: launch.processes: must be a whole number >= 1 (got 0)
    """
    if launch["processes"] < 1:
        raise ConfigError(f"launch.processes: must be a whole number >= 1 (got {launch['processes']})")
    if launch["launcher"] == "accelerate" and not _accelerate_file(launch).is_file():
        known = sorted(p.stem for p in (CONF_DIR / "accelerate").glob("*.yaml"))
        raise ConfigError(f"launch.accelerate_config: {launch['accelerate_config']!r} is not a launch file under "
                          f"conf/accelerate/ ({', '.join(known)})")


def _accelerate_file(launch: Mapping) -> Path:
    return CONF_DIR / "accelerate" / f"{launch['accelerate_config']}.yaml"


def launch_command(launch: Mapping, overrides: Sequence[str], run_dir: Path) -> list[str]:
    """The command that starts `launch.processes` ranks of `python -m train` in `run_dir`, with the job's
    overrides; the ranks start nothing themselves (`launch.launcher=null`) and leave Hydra's record to the job.

    >>> launch_command({"launcher": "torchrun", "processes": 2}, ["seed=1"], Path("/o/0"))[3:]
    ['--standalone', '--nproc_per_node', '2', '-m', 'train', 'seed=1', 'launch.launcher=null', \
'hydra.run.dir=/o/0', 'hydra.output_subdir=null']
    """
    if launch["launcher"] == "accelerate":
        head = ["accelerate.commands.launch", "--config_file", str(_accelerate_file(launch)),
                "--num_processes", str(launch["processes"])]
    else:  # torchrun; --standalone finds a free port, so jobs sharing a machine do not collide
        head = ["torch.distributed.run", "--standalone", "--nproc_per_node", str(launch["processes"])]
    return [sys.executable, "-m", *head, "-m", "train", *overrides, "launch.launcher=null",
            f"hydra.run.dir={run_dir}", "hydra.output_subdir=null"]


def relaunch(launch: Mapping, overrides: Sequence[str], run_dir: Path) -> float:
    """Start the ranks (`launch_command`), wait for them, and return the objective their run.json records.

    A failure of the ranks raises, naming their error.txt; the ranks are stopped whenever this returns
    or raises (also on the signal that requeues a SLURM job).
    """
    check_launch(launch)
    command = launch_command(launch, overrides, run_dir)
    log.info("starting %d processes: %s", launch["processes"], " ".join(command))
    # Its own session: the whole group of ranks can be stopped at once, and a terminal's Ctrl-C reaches this
    # process, which stops them, rather than each rank separately.
    ranks = subprocess.Popen(command, start_new_session=True)
    try:
        returncode = ranks.wait()
    finally:
        _stop(ranks)
    if returncode != 0:
        raise RuntimeError(f"{launch['launcher']} exited with {returncode}; the failing rank's error is in "
                           f"{run_dir / ERROR} (if it could write one)")
    value = read_mapping(run_dir / RUN_JSON).get("objective")
    if not is_number(value):
        raise RuntimeError(f"{run_dir / RUN_JSON}: no objective recorded after the ranks finished")
    return float(value)


def _stop(ranks: subprocess.Popen) -> None:
    """SIGTERM to the ranks' process group, SIGKILL after STOP_GRACE_S; nothing if they are gone."""
    if ranks.poll() is not None:
        return
    os.killpg(ranks.pid, signal.SIGTERM)
    try:
        ranks.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(ranks.pid, signal.SIGKILL)
        ranks.wait()
