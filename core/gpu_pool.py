"""The GPUs a sweep's jobs share on one machine (`launch.gpus`), each held by one job at a time through a kernel
lock on one file per GPU in the sweep folder's `.gpus/` (gone with a job that dies); read without CUDA.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

log = logging.getLogger(__name__)

POOL_DIR = ".gpus"  # in the sweep folder
# How often a job that finds no free GPU looks again (more jobs at once than GPUs)
WAIT_S = 2.0


def visible_gpus(env: Mapping[str, str] = os.environ) -> list[str]:
    """The GPUs this process may use, without initialising CUDA: CUDA_VISIBLE_DEVICES (up to a negative index, where
    CUDA stops reading), else `nvidia-smi`'s indices.

    >>> visible_gpus({"CUDA_VISIBLE_DEVICES": "0, 2,3"}), visible_gpus({"CUDA_VISIBLE_DEVICES": ""})
    (['0', '2', '3'], [])
    >>> visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}), visible_gpus({"CUDA_VISIBLE_DEVICES": "0,-1,2"})
    ([], ['0'])
    """
    if "CUDA_VISIBLE_DEVICES" in env:
        listed = [gpu.strip() for gpu in env["CUDA_VISIBLE_DEVICES"].split(",") if gpu.strip()]
        hidden = next((i for i, gpu in enumerate(listed) if gpu.startswith("-")), len(listed))
        return listed[:hidden]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    listed = subprocess.run([smi, "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True,
                            timeout=60)
    return listed.stdout.split() if listed.returncode == 0 else []


def jobs_at_once(gpus: Sequence, processes: int) -> int:
    """How many jobs of `processes` GPUs each the pool runs at once (at least one).

    >>> jobs_at_once(["0", "1", "2", "3"], 1), jobs_at_once(["0", "1", "2", "3"], 2), jobs_at_once([], 1)
    (4, 2, 1)
    """
    return max(1, len(gpus) // int(processes))


@contextmanager
def claimed_gpus(pool: Sequence[str], count: int, folder: Path, wait_s: float = WAIT_S) -> Iterator[list[str]]:
    """Hold `count` GPUs of `pool` (locks under `folder`) for the with-block; waits while fewer are free."""
    folder.mkdir(parents=True, exist_ok=True)
    waited = False
    while True:
        with ExitStack() as held:
            claimed: list[str] = []
            for gpu in pool:
                if len(claimed) < count and _try_lock(folder, gpu, held):
                    claimed.append(gpu)
            if len(claimed) == count:
                yield claimed
                return
        if not waited:
            log.info("waiting for %d free GPU(s) of %s (held by this sweep's other jobs)", count, ", ".join(pool))
            waited = True
        time.sleep(wait_s)


def _try_lock(folder: Path, gpu: str, held: ExitStack) -> bool:
    """Take `gpu`'s lock now, kept by `held` until it closes; False when another job holds it."""
    lock = FileLock(folder / f"gpu-{re.sub(r'[^A-Za-z0-9_.-]', '_', gpu)}.lock", timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return False
    held.callback(lock.release)
    return True
