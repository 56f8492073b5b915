"""The Hydra config root (also importable, so tests and other apps compose the same files).

Importing it registers the config's resolvers, wherever the config is composed or resolved: the apps,
the tests, and a job Hydra's submitit launcher runs on a cluster node (its callbacks import `conf`).
"""

import time
from datetime import datetime
from functools import partial
from pathlib import Path

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from conf.schema import RootConfig
from core.checks import ConfigError
from core.gpu_pool import jobs_at_once, visible_gpus
from core.rundir.files import RUN_JSON

CONF_DIR = Path(__file__).resolve().parent
# The root schema config.yaml's defaults list starts from; stored on import, so that whatever composes
# these files (the apps, the report, the tests) types them alike.
ConfigStore.instance().store(name="base_config", node=RootConfig)


def run_dir(resume: str | None, fresh: str) -> str:
    """`resume` when set (it must be a run directory), else `fresh`.

    Checked here, while Hydra resolves its run directory: once the resolver returns, Hydra creates
    the folder and writes into it, and a mistyped path would start a fresh ladder there.
    """
    if not resume:
        return fresh
    if not (Path(resume) / RUN_JSON).is_file():
        state = "is not a run directory" if Path(resume).is_dir() else "does not exist"
        raise ConfigError(f"resume={resume}: {state}; a run directory holds run.json (with config.yaml, "
                          "metrics.jsonl and stages/). Give the folder of the run to continue, or drop resume= "
                          "to start a new run.")
    return resume


def hydra_subdir(resume: str | None) -> str | None:
    """Where Hydra records this invocation: `.hydra` for a new run. A resume
    gets none from Hydra, which would write it before the resume can be refused: the run writes its own,
    `.hydra/resume-<time>/` beside the original (which a sweep report reads), once it goes on (conf/claim.py
    HeldResume)."""
    return None if resume else ".hydra"


def share(part, whole) -> float:
    """`part / whole`, rounded: a memory share such as vLLM's `${kk_share:${gpu.vllm_gb},${gpu.memory_gb}}`.

    >>> share(7, 24)
    0.292
    """
    return round(float(part) / float(whole), 3)


def source_when(offline, offline_source: str, online_source: str) -> str:
    """A task's source under `offline` (experiment=smoke sets it): the offline one, else the online one.

    >>> source_when(True, "sample", "hub"), source_when(False, "sample", "hub")
    ('sample', 'hub')
    """
    return offline_source if offline else online_source


def launch_time(pattern: str, launched: float | None = None) -> str:
    """The launch's start time (`launched`, seconds since the epoch; None: now) formatted by `pattern`.

    >>> launch_time("%Y", launched=0.0) in ("1969", "1970")
    True
    """
    return datetime.fromtimestamp(time.time() if launched is None else launched).strftime(pattern)


def register_resolvers(launched: float | None = None) -> None:
    """Resolvers the configs use: `kk_run_dir` (the run directory), `kk_hydra_subdir` (Hydra's record),
    `kk_share` (a ratio), `kk_now` (the time a run's and a sweep's folders are named by), and `kk_visible_gpus`,
    `kk_jobs_at_once` (launch=per_gpu's pool of GPUs and the jobs it runs at once: core/gpu_pool.py).

    `kk_now` stands in for Hydra's `now`: with many processes every rank is handed the main process's
    launch time (`launched`), so all of them name the same folder. Hydra registers its own `now` again
    inside every run, so overriding `now` would not hold. Cached per config, as Hydra caches `now`: a
    sweep's jobs (also on a cluster node) resolve the time their sweep was launched at.
    """
    OmegaConf.register_new_resolver("kk_run_dir", run_dir, replace=True)
    OmegaConf.register_new_resolver("kk_hydra_subdir", hydra_subdir, replace=True)
    OmegaConf.register_new_resolver("kk_share", share, replace=True)
    OmegaConf.register_new_resolver("kk_source_when", source_when, replace=True)
    OmegaConf.register_new_resolver("kk_now", partial(launch_time, launched=launched), replace=True, use_cache=True)
    # launch=per_gpu: the GPUs its jobs share, read without CUDA, and how many jobs run at once on them
    OmegaConf.register_new_resolver("kk_visible_gpus", visible_gpus, replace=True, use_cache=True)
    OmegaConf.register_new_resolver("kk_jobs_at_once", jobs_at_once, replace=True)


register_resolvers()
