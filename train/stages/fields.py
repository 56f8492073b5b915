"""A trainer config's fields, the same for every kind (`trainer_fields`), checked before any model loads against
the trainer's dataclass (`check_trainer_fields`); `model.lora` read with the schema's defaults.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Mapping
from pathlib import Path

from conf.schema import LoraConfig, with_defaults
from core.checks import ConfigError, is_int, is_number, plain
from core.models import device_settings
from curriculum.plan import Stage

# Set by the runner per stage; a config that sets them would be silently overridden.
RUNNER_OWNED = {"output_dir", "max_steps", "report_to", "bf16", "use_cpu", "model_init_kwargs", "reward_weights"}


def lora_settings(lora) -> dict | None:
    """`model.lora` with the schema's defaults for what it leaves out; None where null (full weights train)."""
    return with_defaults(LoraConfig, plain(lora)) if lora else None


def lora_config(model_cfg: Mapping):
    """PEFT's LoraConfig from `model.lora`, or None. PEFT is an optional extra, imported only where LoRA is used."""
    adapters = lora_settings(model_cfg.get("lora"))
    if adapters is None:
        return None
    try:
        from peft import LoraConfig as PeftLoraConfig
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError("model.lora: LoRA needs the peft extra: pip install -e '.[peft]'") from err
    return PeftLoraConfig(r=adapters["r"], lora_alpha=adapters["alpha"], lora_dropout=adapters["dropout"],
                          target_modules=adapters["target_modules"], task_type="CAUSAL_LM")


def trainer_fields(section: Mapping, stage: Stage, *, seed: int, output_dir: Path, lora: Mapping | None,
                   config_class: type) -> dict:
    """A trainer config's fields: the kind's group, LoRA's rate, the stage's overrides, then the runner's."""
    device = device_settings()
    fields = {"optim": device["optim"], **section}
    adapters = lora_settings(lora)
    if adapters is not None:
        fields["learning_rate"] = float(adapters["learning_rate"])
    fields.update(stage.overrides)
    fields.update(
        output_dir=str(output_dir),
        max_steps=stage.steps,
        seed=seed + stage.index,
        report_to="none",
        bf16=device["bf16"],
        use_cpu=device["use_cpu"],
        model_init_kwargs={"dtype": str(device["dtype"]).removeprefix("torch.")},
        save_strategy="steps",
    )
    return installed_names(fields, config_class)


# The configs use transformers 5.24's names; vLLM 0.31 (TRL 1.16's newest) needs transformers < 5.18, the old ones
RENAMED_FIELDS = {"activation_checkpointing": "gradient_checkpointing",
                  "activation_checkpointing_kwargs": "gradient_checkpointing_kwargs"}


def installed_names(fields: Mapping, config_class: type) -> dict:
    """`fields` with each renamed field under the name `config_class` (the installed TRL/transformers) knows.

    >>> Old = dataclasses.make_dataclass("Old", ["gradient_checkpointing", "seed"])  # transformers before 5.24
    >>> installed_names({"activation_checkpointing": True, "seed": 1}, Old)
    {'gradient_checkpointing': True, 'seed': 1}
    """
    known = {spec.name for spec in dataclasses.fields(config_class)}
    return {(RENAMED_FIELDS[k] if k in RENAMED_FIELDS and k not in known else k): v for k, v in fields.items()}


# GRPOConfig's sampling fields and their values (transformers checks them only once it generates, after the baseline)
SAMPLING_RANGES = {
    "temperature": (lambda v: v > 0, "> 0 (TRL divides the logits by it; GRPO needs sampled, differing completions)"),
    "top_p": (lambda v: 0 < v <= 1, "in (0, 1] (1: every token)"),
    "top_k": (lambda v: v >= 0, ">= 0 (0: no top-k filter)"),
    "min_p": (lambda v: 0 <= v <= 1, "in [0, 1], or null"),
    "repetition_penalty": (lambda v: v > 0, "> 0 (1: none)"),
}
# The field types a value is checked against; others (`str | list[str]`, enums of transformers) are TRL's to check.
SCALARS = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}


def check_trainer_fields(fields: Mapping, config_class: type, key: str) -> None:
    """Each field a config sets is the trainer's, of its plain type, not the runner's, no warmup, sampling in range."""
    known = {spec.name: spec.type for spec in dataclasses.fields(config_class)}
    for name, value in installed_names(fields, config_class).items():
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {key}.{close[0]}?" if close else ""
            raise ConfigError(f"{key}.{name}: not a {config_class.__name__} field (TRL){hint}")
        if name in RUNNER_OWNED:
            raise ConfigError(f"{key}.{name}: set by the runner per stage; use limits.max_steps or the stage's steps")
        expected = _plain_type(known[name])
        if expected and not _fits(value, *expected):
            raise ConfigError(f"{key}.{name}: {value!r} is not {SCALARS[expected[0]]} ({config_class.__name__})")
    # Every optimizer step must update the policy; transformers' warmup spends the first at learning rate 0.
    if (fields.get("warmup_steps") or 0) > 0:
        raise ConfigError(f"{key}.warmup_steps: {fields['warmup_steps']} > 0 makes the stage's first optimizer step "
                          "run at learning rate 0 (transformers' warmup starts from 0); use 0")
    for name, (fits, wanted) in SAMPLING_RANGES.items():
        value = fields.get(name)
        if is_number(value) and not (is_number(value, finite=True) and fits(value)):
            raise ConfigError(f"{key}.{name}: must be {wanted} (got {value!r})")


def _plain_type(annotation) -> tuple[type, bool] | None:
    """(type, whether null is allowed) for `int` or `int | None` and the like; None for any other annotation."""
    if annotation in SCALARS:
        return annotation, False
    args = set(typing.get_args(annotation))
    others = args - {type(None)}
    if type(None) in args and len(others) == 1 and next(iter(others)) in SCALARS:
        return next(iter(others)), True
    return None


def _fits(value, expected: type, nullable: bool) -> bool:
    if value is None:
        return nullable
    if expected in (bool, str):
        return isinstance(value, expected)
    return is_number(value) if expected is float else is_int(value)
