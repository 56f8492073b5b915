"""Shared fixtures: configs composed in-process (as `python -m train` would) and a shared model cache.

Every config a test needs comes from `compose_cfg`: a test takes the `make_cfg` fixture (the
session's model cache, its own tmp_path as output dir); a module- or session-scoped fixture, which
cannot take a per-test fixture, calls `compose_cfg` itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from conf.errors import check_schema, config_error_line
from core.checks import ConfigError
from tests import engine_guard

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data" / "kk-logic-rl"

# Tests never reach a hub, and wandb never phones home.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

# CUDA's one-vLLM-engine-per-process rule, which vLLM's CPU build skips (tests/engine_guard.py): in this process
# a start while another engine is alive fails, and every process a test starts keeps to one engine.
engine_guard.install(strict=False)
os.environ["KK_ENGINE_GUARD"] = "strict"
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(ROOT / "tests" / "guard_site"), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])

@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One model cache for the whole session: the tiny model is built once."""
    return tmp_path_factory.mktemp("model-cache")


def compose_cfg(cache_dir: Path | None, *overrides: str, output_dir: Path | None = None,
                hydra_config: bool = False) -> DictConfig:
    """The config `python -m train <overrides>` would run, composed in process from conf/ and checked as
    the app checks it: a config error is a ConfigError holding the app's one line.

    `cache_dir` and `output_dir` set paths.* (None keeps the configured one); `hydra_config` keeps the
    `hydra` node (launcher, sweeper) that only a run would otherwise see. `cpu_threads` is pinned to 1 (a test's
    own `cpu_threads=` wins): `auto` picks from the machine's load, and another thread count sums floats in
    another order, so two runs a test compares would differ on a busy machine.
    """
    paths = {"paths.cache_dir": cache_dir, "paths.output_dir": output_dir}
    pinned = ["cpu_threads=1", *(f"{key}={value}" for key, value in paths.items() if value is not None)]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        try:
            cfg = compose("config", overrides=[*pinned, *overrides], return_hydra_config=hydra_config)
        except Exception as err:  # refused while composing: the app's one line, as a ConfigError
            line = config_error_line(err)
            if line is None:
                raise
            raise ConfigError(line) from err
    check_schema(cfg)  # what the app's SchemaCheck callback does before a run starts
    return cfg


@pytest.fixture
def make_cfg(cache_dir, tmp_path):
    """make_cfg(*overrides): `compose_cfg` with the session's model cache and this test's tmp_path as output dir."""
    return partial(compose_cfg, cache_dir, output_dir=tmp_path)


def run_cli(*args: str, cwd: Path = ROOT, timeout: int = 600, env: dict | None = None, merged: bool = False,
            **kwargs):
    """Run `python -m <args>` as a user would, returning the CompletedProcess (output captured; `merged`:
    stderr into stdout, in the order a terminal shows them)."""
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT} if merged else {"capture_output": True}
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, **streams, **kwargs)


@pytest.fixture(scope="session")
def smoke_ladder(tmp_path_factory, cache_dir):
    """The smoke ladder (tiny model, 5 stages, reference refresh on), run once per session in process.

    Returns (run_dir, objective).
    """
    from train.run.runner import run_curriculum
    from train.settings import read_settings

    run_dir = tmp_path_factory.mktemp("smoke-ladder")
    cfg = compose_cfg(cache_dir, "+curriculum=kk_ladder", "experiment=smoke")
    objective = run_curriculum(read_settings(cfg), run_dir)
    return run_dir, objective
