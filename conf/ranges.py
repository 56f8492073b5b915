"""Ranges a type cannot say, checked before anything is written or loaded (else a seed beyond 32 bits, a NaN rate or
a stage name too long for a folder fails later, after the run folder exists): each refusal one line naming the key.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationKeyError, InterpolationResolutionError, InterpolationToMissingValueError

from conf.schema import schema_fields, typed_blocks
from core.checks import ConfigError, is_int, is_number
from core.rundir.files import STAGES
from core.rundir.records import FINAL_MARKER

THREADS_PER_CORE = 4  # beyond this many threads per core torch only waits; 100000 ran out of memory
STAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")  # a folder's name on every file system, 64 at most
# The trainers' fields that are counts of steps (> 0: save_steps 0 keeps no checkpoint) and bounds that are >= 0
POSITIVE_STEPS = ("logging_steps", "save_steps")
NON_NEGATIVE = ("epsilon", "epsilon_high", "beta", "max_grad_norm", "warmup_ratio", "weight_decay")
TRAINER_GROUPS = ("grpo", "sft")


def check_ranges(cfg: DictConfig, stage_names: Iterable[str] = ()) -> None:
    """Raise ConfigError for the first value of `cfg` out of its range (its `stage_names`: the plan's)."""
    plain = {key: OmegaConf.to_container(cfg[key], resolve=True) if OmegaConf.is_config(cfg[key]) else cfg[key]
             for key in cfg if key != "hydra"}  # Hydra's own node resolves only inside a run
    for key, value in _leaves(plain):
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{key}: {value} is not a finite number; give a number")
    check_field_ranges(OmegaConf.to_container(cfg, resolve=False))
    check_cpu_threads(cfg.get("cpu_threads"))
    for group in TRAINER_GROUPS:
        fields = OmegaConf.to_container(cfg[group], resolve=True) if cfg.get(group) is not None else {}
        for name in POSITIVE_STEPS:
            if name in fields and not (is_int(fields[name]) and fields[name] > 0):
                raise ConfigError(f"{group}.{name}: {fields[name]!r} is not a whole number of steps > 0 "
                                  "(1: every step)")
        for name in NON_NEGATIVE:
            if is_number(fields.get(name)) and fields[name] < 0:
                raise ConfigError(f"{group}.{name}: {fields[name]} is negative; give a value >= 0")
    for name in stage_names:  # a stage's name is a folder's (`stages/<k>-<name>`)
        if not STAGE_NAME.fullmatch(str(name)):
            shown = repr(name) if len(str(name)) <= 70 else f"{str(name)[:40]!r}... ({len(str(name))} characters)"
            raise ConfigError(f"curriculum.stages: stage name {shown} is not a folder name: use up to 64 letters, "
                              "digits, '.', '_', '+' or '-', starting with a letter or digit")


def check_field_ranges(config: dict) -> None:
    """Raise ConfigError for the first plain value outside its schema field's range (interpolations aside)."""
    for block, data, record in typed_blocks(config):
        for dotted, item, _ in schema_fields(record):
            within, value = item.metadata.get("range"), data
            for part in dotted.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            if within is None or value is None:
                continue
            key = f"{block}.{dotted}" if block else dotted
            named = {f"{key}.{name}": each for name, each in value.items()} if isinstance(value, dict) else {key: value}
            for shown, each in named.items():
                if not (isinstance(each, str) and "${" in each) and not within.holds(each):
                    raise ConfigError(f"{shown}: {each!r} is not {within.describe(item.metadata['help'])}")


def check_cpu_threads(setting, cores: int | None = None) -> None:
    """`cpu_threads`: auto, or a whole number from 1 to THREADS_PER_CORE x this machine's cores (`cores`)."""
    if setting is None or setting == "auto":
        return
    cores = cores or os.cpu_count() or 1
    if not (is_int(setting) and setting > 0):
        raise ConfigError(f"cpu_threads: must be auto or a whole number > 0 (got {setting!r})")
    if setting > THREADS_PER_CORE * cores:
        raise ConfigError(f"cpu_threads: {setting} threads on a machine of {cores} cores; use auto, or at most "
                          f"{THREADS_PER_CORE * cores} (threads beyond the cores only wait on each other)")


def check_output_dir(run_dir: Path) -> None:
    """Refuse a run's or a validation's folder (`hydra.run.dir`) inside a stage's final, which writing would change."""
    for folder in [run_dir, *run_dir.parents]:
        if (folder / FINAL_MARKER).is_file() or (folder.name == "final" and folder.parent.parent.name == STAGES):
            raise ConfigError(f"hydra.run.dir: {run_dir} is inside the stage final {folder}, which writing there would "
                              "change; give a folder outside it (or leave hydra.run.dir out)")


def check_interpolations(cfg: DictConfig, prefix: str = "") -> None:
    """Raise ConfigError naming the first key whose interpolation points at no key or back at itself."""
    for key in cfg.keys() if isinstance(cfg, DictConfig) else range(len(cfg)):
        path = f"{prefix}.{key}" if prefix and isinstance(cfg, DictConfig) else (f"{prefix}[{key}]" if prefix else key)
        if path == "hydra":
            continue
        raw = cfg._get_node(key)._value() if cfg._get_node(key) is not None else None
        try:
            value = cfg[key]
        except (InterpolationKeyError, InterpolationToMissingValueError) as err:
            raise ConfigError(f"{path}: {raw} points at {_missing(err)}; give {path} a value, or "
                              "interpolate a key that exists") from None
        except InterpolationResolutionError as err:
            if "Recursive interpolation" not in str(err):
                continue  # a resolver's refusal (resume=) says what it is itself
            raise ConfigError(f"{path}: {raw} refers back to itself (a recursive interpolation); give {path} "
                              "a value") from None
        if isinstance(value, (DictConfig, ListConfig)):
            check_interpolations(value, str(path))


def _missing(err: Exception) -> str:
    found = re.search(r"'([^']+)'", str(err))
    return f"{found[1]}, which is not a config key" if found else "a key that is not there"


def _leaves(tree, prefix: str = "") -> Iterator[tuple[str, object]]:
    """(dotted key, value) of every leaf of a plain config, the `hydra` node left out."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            if not prefix and key == "hydra":
                continue
            yield from _leaves(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            yield from _leaves(value, f"{prefix}[{i}]")
    else:
        yield prefix, tree
