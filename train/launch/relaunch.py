"""`launch=`: a Hydra job (a sweep's) that starts its run's processes itself, waits, and returns the objective its
run.json records: `launch=per_gpu` (one process on a GPU claimed from the sweep's pool; the job never initialises
CUDA, as joblib runs many jobs in one worker), or `launch=accelerate|torchrun` (through train/launch/agent.py, which
names a rank a signal killed). Before the job exits (also on a requeue's signal) it stops its ranks, so none of an
old attempt holds the run lock.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path

from conf.errors import accelerate_file, check_launch
from core.checks import is_number
from core.gpu_pool import POOL_DIR, claimed_gpus
from core.rundir.files import ERROR, RUN_JSON, read_mapping
from train.failures import killed_line, replace_follow_on

log = logging.getLogger(__name__)

# How long the ranks get to stop on SIGTERM (a trainer checkpoint being written) before SIGKILL.
STOP_GRACE_S = 60
# What the job's run is told: it trains (starts nothing) on what its CUDA_VISIBLE_DEVICES shows it
RUN_ITSELF = ["launch.launcher=null", "launch.gpus=null"]


def launch_command(launch: Mapping, overrides: Sequence[str], run_dir: Path) -> list[str]:
    """The command that starts `launch.processes` ranks of `python -m train` in `run_dir`.

    >>> launch_command({"launcher": "torchrun", "processes": 2}, ["seed=1"], Path("/o/0"))[3:]
    ['/o/0/error.txt', '2', 'torchrun', '--standalone', '--nproc_per_node', '2', '-m', 'train', 'seed=1', \
'launch.launcher=null', 'launch.gpus=null', 'hydra.run.dir=/o/0', 'hydra.output_subdir=null']
    """
    run = ["-m", "train", *overrides, *RUN_ITSELF, f"hydra.run.dir={run_dir}", "hydra.output_subdir=null"]
    if launch["launcher"] == "python":
        return [sys.executable, *run]
    if launch["launcher"] == "accelerate":
        # port 0: accelerate picks a free one (two jobs starting at once both found its default 29500 free)
        head = ["accelerate", "--config_file", str(accelerate_file(launch)),
                "--num_processes", str(launch["processes"]), "--main_process_port", "0"]
    else:  # torchrun; --standalone finds a free port, so jobs sharing a machine do not collide
        head = ["torchrun", "--standalone", "--nproc_per_node", str(launch["processes"])]
    return [sys.executable, "-m", "train.launch.agent", str(run_dir / ERROR), str(launch["processes"]), *head, *run]


def relaunch(launch: Mapping, overrides: Sequence[str], run_dir: Path, sweep_dir: Path) -> float:
    """Start the run's processes (on GPUs claimed in `sweep_dir`), wait, and return the objective their run.json
    records; a failure raises, naming error.txt. The processes are stopped before the GPUs are let go."""
    check_launch(launch)
    command = launch_command(launch, overrides, run_dir)
    with ExitStack() as held:
        env = dict(os.environ)
        if launch.get("gpus") is not None:
            gpus = held.enter_context(claimed_gpus(launch["gpus"], launch["processes"], sweep_dir / POOL_DIR))
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
            log.info("%s runs on GPU %s (CUDA_VISIBLE_DEVICES=%s)", run_dir, ", ".join(gpus),
                     env["CUDA_VISIBLE_DEVICES"])
        log.info("starting %d process(es): %s", launch["processes"], " ".join(command))
        returncode = _run(command, env)
    if returncode < 0:  # one process, killed: it recorded nothing itself
        replace_follow_on(run_dir / ERROR, killed_line("the run's process", -returncode))
    if returncode != 0:
        raise RuntimeError(f"{launch['launcher']} exited with {returncode}; the run's error is in {run_dir / ERROR} "
                           "(if it could write one)")
    value = read_mapping(run_dir / RUN_JSON).get("objective")
    if not is_number(value):
        raise RuntimeError(f"{run_dir / RUN_JSON}: no objective recorded after the run's processes finished")
    return float(value)


def _run(command: list[str], env: dict[str, str]) -> int:
    """Run `command` in a session of its own and wait: its whole group is stopped at once, by this process."""
    ranks = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        return ranks.wait()
    finally:
        _stop(ranks)


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
