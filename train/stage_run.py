"""What every stage kind shares: what it is given, the shape it fills in, and train -> publish.

A kind (GRPO in `train/grpo_stage.py`, SFT in `train/sft_stage.py`, looked up by name in
`train/stage_kinds.py`) says only what differs: its rows, its checks, its trainer. `run_stage`
does the rest the same way for each: fingerprint the start, train (resuming a killed run's last
complete checkpoint), save full weights (LoRA merged) and publish `stages/<k>-<name>/final`.

Checkpoints on disk (the second half of the file): a trainer checkpoint counts only once
`trainer_state.json` (written last by transformers) parses; a stage's final is written to a
temporary folder and renamed, with `stage.json` inside, so a kill during either save never leaves
a half checkpoint that a resume would pick up.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
import time
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch
from transformers import Trainer, TrainerState
from transformers.trainer import TRAINER_STATE_NAME

from core.checks import ConfigError, is_int, is_number
from core.models import LORA_LEARNING_RATE, device_settings, merge_lora_and_save
from core.rundir import JsonlWriter, final_checkpoint, stage_path
from curriculum.plan import Stage
from curriculum.prompts import prompt_ids
from train.tracking import MetricsCallback, bind_to_trainer

# Set by the runner per stage; a config that sets them would be silently overridden.
RUNNER_OWNED = {"output_dir", "max_steps", "report_to", "bf16", "use_cpu", "model_init_kwargs", "reward_weights"}

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KindSettings:
    """What a stage kind reads besides its own config group (`grpo`, `sft`): plain copies of these groups."""

    prompt: Mapping  # rows are rendered with it; its `fmt` is the format the grader reads
    model: Mapping  # chat, chat_template_kwargs, context_length, lora
    reward: Mapping  # the reward group (GRPO's reward functions)
    seed: int  # each stage's trainer is seeded with seed + its index


@dataclass
class StageContext:
    """What a stage needs from the run around it."""

    run_dir: Path
    init_model: str  # the checkpoint this stage starts from
    reference_model: str | None  # the checkpoint TRL's reference holds (None: beta 0, no reference)
    step_offset: int  # global steps done before this stage
    config_hash: str  # of the run's config: its final's stage.json names it (a resume adopts only its own)
    keep_trainer_checkpoints: bool
    metrics: JsonlWriter
    tracker: object
    callbacks: list = field(default_factory=list)  # more TrainerCallbacks (the stage end's, a caller's)


@dataclass(frozen=True)
class StageResult:
    """What training a stage produced, as run.json records it; its final's `stage.json` holds most of it."""

    checkpoint: str  # its final, relative to the run directory (a run directory may be moved)
    steps_done: int
    policy_fingerprint: str | None  # of the weights it started from
    reference: str | None  # the checkpoint its KL is measured against
    reference_fingerprint: str | None
    resumed_from: str | None = None  # the trainer checkpoint it continued from
    wall_seconds: float | None = None  # training and publishing (None: a final adopted after a kill)

    def marker(self, stage_name: str, config_hash: str, init: str) -> dict:
        """The final's `stage.json`: which stage of which config it is, where it started, and this result."""
        return {"stage": stage_name, "config_hash": config_hash, "steps_done": self.steps_done, "init": init,
                "policy_fingerprint": self.policy_fingerprint, "reference": self.reference,
                "reference_fingerprint": self.reference_fingerprint}

    @classmethod
    def from_marker(cls, checkpoint: str, info: Mapping) -> StageResult:
        """The result a published final's `stage.json` holds (nothing of how long it took)."""
        return cls(checkpoint, int(info["steps_done"]), info.get("policy_fingerprint"), info.get("reference"),
                   info.get("reference_fingerprint"))


class StageKind(Protocol):
    """What one kind of stage (`kind:` in a curriculum) brings; `run_stage` does the rest.

    A kind is built from its config group (`cfg.<name>`) and the `KindSettings` every kind shares.
    """

    name: str
    learns_from_rewards: bool  # reinforcement learning starts at the first such stage (`reference: rl_start`)

    def rows(self, records: list[dict], tokenizer):
        """The stage's training rows (a datasets.Dataset) from its pool's records."""

    def check(self, stage: Stage, key: str) -> None:
        """Raise ConfigError naming the key (under `key`, the stage's overrides) before any model loads."""

    def check_lengths(self, stage: Stage, rows, tokenizer) -> None:
        """Raise ConfigError if a row does not fit the kind's token budget (nothing is truncated silently)."""

    def has_reference(self, stage: Stage) -> bool:
        """Whether the stage's loss holds the policy to a reference model (GRPO's KL term)."""

    def trainer(self, stage: Stage, ctx: StageContext, rows, output_dir: Path, callbacks: list) -> Trainer:
        """The TRL trainer for the stage, its policy loaded from `ctx.init_model`."""

    def reference_fingerprint(self, trainer: Trainer) -> str | None:
        """The fingerprint of the weights the loss measures KL against, or None."""


def run_stage(kind: StageKind, stage: Stage, ctx: StageContext, rows) -> StageResult:
    """Train one stage of `kind` and publish `stages/<k>-<name>/final`."""
    began = time.time()
    stage_dir = stage_path(ctx.run_dir, stage.dirname)
    metrics = MetricsCallback(ctx.metrics, ctx.tracker, stage_index=stage.index, stage_name=stage.name,
                              ppl=stage.ppl_label, step_offset=ctx.step_offset)
    trainer = kind.trainer(stage, ctx, rows, stage_dir / "trainer", [metrics, *ctx.callbacks])
    bind_to_trainer(trainer)  # the run's console and rollout sampler, in place of the trainer's printers
    # Before training: a resume loads its checkpoint into the policy, and the stage started from init_model.
    start = fingerprint(trainer.model)
    reference = kind.reference_fingerprint(trainer)
    resumed_from = resume_and_train(trainer, stage_dir, stage.name)
    result = StageResult(str(final_checkpoint(stage.dirname)), trainer.state.global_step, start, ctx.reference_model,
                         reference, resumed_from)
    publish_stage(trainer.model, trainer.processing_class, stage_dir,
                  result.marker(stage.name, ctx.config_hash, ctx.init_model),
                  keep_trainer_checkpoints=ctx.keep_trainer_checkpoints)
    return dataclasses.replace(result, wall_seconds=round(time.time() - began, 2))


def trainer_fields(section: Mapping, stage: Stage, *, seed: int, output_dir: Path, lora: Mapping | None) -> dict:
    """A trainer config's fields: the kind's config group, LoRA's rate, the stage's overrides, then the runner's.

    Adapters train at their own, larger rate (TRL's PEFT docs: about 10x); a stage's overrides still win.
    """
    device = device_settings()
    fields = {"optim": device["optim"], **section}
    if lora:
        fields["learning_rate"] = float(lora.get("learning_rate") or LORA_LEARNING_RATE)
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
    return fields


def check_trainer_fields(fields: Mapping, config_class: type, key: str) -> None:
    """Every field a config sets is a field of the trainer's config (TRL's dataclass), with a value of its type
    where that is a plain one (bool, int, float, str, or one of them or null), not one the runner sets, and not
    a warmup."""
    known = {spec.name: spec.type for spec in dataclasses.fields(config_class)}
    for name, value in fields.items():
        if name not in known:
            raise ConfigError(f"{key}.{name}: not a {config_class.__name__} field (TRL)")
        if name in RUNNER_OWNED:
            raise ConfigError(f"{key}.{name}: set by the runner per stage; use limits.max_steps or the stage's steps")
        expected = _plain_type(known[name])
        if expected and not _fits(value, *expected):
            raise ConfigError(f"{key}.{name}: {value!r} is not {SCALARS[expected[0]]} ({config_class.__name__})")
    # Every optimizer step must update the policy; transformers' warmup spends the first at learning rate 0.
    if (fields.get("warmup_steps") or 0) > 0:
        raise ConfigError(f"{key}.warmup_steps: {fields['warmup_steps']} > 0 makes the stage's first optimizer step "
                          "run at learning rate 0 (transformers' warmup starts from 0); use 0")


# The field types a value is checked against; others (`str | list[str]`, enums of transformers) are TRL's to check.
SCALARS = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}


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


def token_counts(texts: list[str], tokenizer) -> list[int]:
    """How many tokens each text is, tokenized as TRL's trainers tokenize it (`prompt_ids`)."""
    return [len(prompt_ids(text, tokenizer)) for text in texts]


def resume_and_train(trainer, stage_dir: Path, stage_name: str) -> str | None:
    """Train, continuing from the stage's last complete trainer checkpoint if a killed run left one.

    A checkpoint already at the budget (a kill while the final was written) is loaded, not trained
    on: training it again would run a step past `max_steps` and shift every later global step.
    """
    resume_from = last_complete_checkpoint(stage_dir / "trainer")
    if resume_from is None:
        trainer.train()
        return None
    state = TrainerState.load_from_json(str(resume_from / TRAINER_STATE_NAME))
    if state.global_step >= trainer.args.max_steps:
        log.info("stage %s: %s is at the budget; publishing it without training", stage_name, resume_from)
        trainer._load_from_checkpoint(str(resume_from))
        trainer.state = state
    else:
        log.info("stage %s: resuming from %s", stage_name, resume_from)
        trainer.train(resume_from_checkpoint=str(resume_from))
    return str(resume_from)


def publish_stage(model, tokenizer, stage_dir: Path, info: dict, *, keep_trainer_checkpoints: bool) -> None:
    """Save full weights (LoRA merged) to `final.tmp`, publish it as `final`, prune trainer checkpoints."""
    tmp = stage_dir / "final.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    merge_lora_and_save(model, tokenizer, tmp)
    publish_final(tmp, stage_dir / "final", info)
    if not keep_trainer_checkpoints:
        shutil.rmtree(stage_dir / "trainer", ignore_errors=True)


FINAL_MARKER = "stage.json"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


def _has_weights(path: Path) -> bool:
    return any((path / name).exists() for name in WEIGHT_FILES)


def last_complete_checkpoint(trainer_dir: Path) -> Path | None:
    """The newest `checkpoint-N` whose trainer state parses and whose weights exist, else None."""
    if not trainer_dir.is_dir():
        return None
    steps = []
    for child in trainer_dir.iterdir():
        match = re.fullmatch(r"checkpoint-(\d+)", child.name)
        if match and child.is_dir():
            steps.append((int(match.group(1)), child))
    for _, child in sorted(steps, reverse=True):
        try:
            json.loads((child / "trainer_state.json").read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if _has_weights(child):
            return child
    return None


def final_info(final_dir: Path) -> dict | None:
    """The `stage.json` of a complete final checkpoint, or None when it is missing or damaged."""
    try:
        info = json.loads((final_dir / FINAL_MARKER).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return info if _has_weights(final_dir) else None


def publish_final(tmp_dir: Path, final_dir: Path, info: dict) -> None:
    """Mark `tmp_dir` complete and move it to `final_dir` in one rename."""
    (tmp_dir / FINAL_MARKER).write_text(json.dumps(info, indent=2))
    if final_dir.exists():  # a damaged earlier final (no marker): it was never handed off
        shutil.rmtree(final_dir)
    os.replace(tmp_dir, final_dir)


def fingerprint(model: torch.nn.Module) -> str:
    """A short digest of every parameter's exact bytes: equal exactly when the weights are equal.

    Hashing bytes (not sums) keeps it independent of thread counts and reduction order. A PEFT
    model is fingerprinted with its adapters off (the base weights under the plain names), which is
    what a LoRA stage's reference is, and equals the checkpoint it was loaded from.
    """
    digest = hashlib.sha256()
    with torch.no_grad():
        for name, param in sorted(_adapter_free(model.named_parameters()), key=lambda kv: kv[0]):
            digest.update(name.encode())
            digest.update(param.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def _adapter_free(named_parameters):
    """(name, parameter) without LoRA adapters, PEFT's wrapper names mapped back to the plain model's."""
    for name, param in named_parameters:
        if ".lora_" in name:
            continue
        yield name.removeprefix("base_model.model.").replace(".base_layer.", "."), param
