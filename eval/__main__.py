"""`python -m eval model=<checkpoint dir or hub id> [overrides]`: validate any model like a run does.

The same config root as `python -m train`, so the pools (eval.seed, eval.subsets, eval.n, data
source), the prompt and the grader are the ones a run uses: the base model, every stage and a model
from elsewhere are compared on identical puzzles. `model=` takes a config name (`tiny`,
`qwen3-0.6b`, ...) or a path / hub id; a stage's final inside a run directory takes that run's
model settings (chat template, context) from its `config.yaml`. The `eval` and `data` settings
are checked, and the pools built, before any model loads; a path that does not exist is named as
such (never looked up on the hub).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from conf import CONF_DIR
from conf.errors import run_app
from conf.schema import ModelConfig
from core.checks import ConfigError
from core.models import configure_cpu_threads, quiet_libraries, resolve_model
from core.rundir import CONFIG, SAMPLES, VALIDATION, JsonlWriter, run_of_final
from core.stats import rate_text
from curriculum.data import validation_pool
from eval.config_check import check_data_config, check_eval_config
from eval.metrics import trials
from eval.settings import validation_settings
from eval.validation import validate

# `org/name` or `name`: what the hub accepts as a model id (a leading "." or "/" makes it a path)
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


def split_checkpoint_arg(argv: list[str]) -> list[str]:
    """Turn `model=<path or hub id>` into `checkpoint=<it>`; `model=<config name>` stays a group choice.

    >>> split_checkpoint_arg(["model=tiny", "eval.n=4"])
    ['model=tiny', 'eval.n=4']
    >>> split_checkpoint_arg(["model=outputs/runs/x/stages/1-2ppl/final"])
    ['checkpoint=outputs/runs/x/stages/1-2ppl/final']
    """
    out = []
    for arg in argv:
        name, eq, value = arg.partition("=")
        if eq and name == "model" and not (CONF_DIR / "model" / f"{value}.yaml").exists():
            arg = f"checkpoint={value}"
        out.append(arg)
    return out


def checkpoint_source(value: str) -> str:
    """`value` as a model to load: an existing checkpoint folder, or a hub id; else a clear error.

    >>> checkpoint_source("Qwen/Qwen2.5-0.5B-Instruct")
    'Qwen/Qwen2.5-0.5B-Instruct'
    >>> checkpoint_source("runs/x/final")
    Traceback (most recent call last):
    core.checks.ConfigError: model=runs/x/final: no such checkpoint folder (and not a hub id, which is org/name)
    """
    path = Path(value)
    if path.is_dir() and not (path / "config.json").exists():
        raise ConfigError(f"model={value}: a folder without config.json, not a checkpoint; give a checkpoint "
                          "folder such as <run>/stages/<k>-<name>/final")
    if path.exists() or HUB_ID.fullmatch(value):
        return value
    raise ConfigError(f"model={value}: no such checkpoint folder (and not a hub id, which is org/name)")


def _run_model_config(checkpoint: Path) -> DictConfig | None:
    """The `model` settings of the run a stage's final belongs to (run/stages/<k>-<name>/final), typed as the
    schema types them (conf/schema.py ModelConfig): a run folder is untrusted."""
    run_dir = run_of_final(checkpoint.resolve())
    if run_dir is None or not (run_dir / CONFIG).exists():
        return None
    try:
        return OmegaConf.merge(OmegaConf.structured(ModelConfig), OmegaConf.load(run_dir / CONFIG).model)
    except OmegaConfBaseException as err:
        raise ConfigError(f"{run_dir / CONFIG}: model: {str(err).splitlines()[0]}") from None


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    quiet_libraries()
    try:
        check_eval_config(cfg.eval)
        check_data_config(cfg.data)
        checkpoint = checkpoint_source(str(cfg.checkpoint)) if cfg.checkpoint else None
        run_model = _run_model_config(Path(checkpoint)) if checkpoint else None
        pools = {int(p): validation_pool(cfg, int(p)) for p in cfg.eval.subsets}
        configure_cpu_threads(cfg.cpu_threads)
    except ConfigError as err:  # the message names the key; a traceback would bury it
        raise SystemExit(f"config error: {err}") from None
    if checkpoint:
        cfg.model = run_model or cfg.model
        model_path = checkpoint
    else:
        model_path = resolve_model(cfg.model, Path(cfg.paths.cache_dir))
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    writer = JsonlWriter(out_dir / VALIDATION, key=("stage", "ppl"))
    tag = {"stage": "eval", "stage_name": model_path, "global_step": 0}
    rows = validate(validation_settings(cfg), model_path, pools, tag=tag, out_dir=out_dir / SAMPLES, writer=writer)
    (out_dir / CONFIG).write_text(OmegaConf.to_yaml(cfg, resolve=True))
    mean = sum(r["accuracy"] for r in rows) / len(rows)
    # the mean over subsets, with the interval of all their puzzles together (exact when the subsets are of one size)
    puzzles = sum(trials(r, "accuracy") or 0 for r in rows)
    print(f"mean accuracy over {len(rows)} subsets: {rate_text(mean, puzzles)}; rows in {out_dir / VALIDATION}, "
          f"graded completions in {out_dir / SAMPLES}")
    return mean


if __name__ == "__main__":
    args = split_checkpoint_arg(sys.argv[1:])
    if not any(a.startswith("hydra.run.dir=") for a in args):
        args.append("hydra.run.dir=${paths.output_dir}/eval/${kk_now:%Y-%m-%d_%H-%M-%S}")
    sys.argv = [sys.argv[0], *args]
    run_app(main)
