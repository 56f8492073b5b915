"""Checkpoints on disk: which are complete, a stage's final, and parameter fingerprints.

A trainer checkpoint counts only once `trainer_state.json` (written last by transformers) parses;
a stage's final is written to a temporary folder and renamed, with `stage.json` inside, so a kill
during either save never leaves a half checkpoint that a resume would pick up.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import torch

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


def check_adoptable(final_dir: Path, info: dict, *, stage_name: str, config_hash: str) -> None:
    """Refuse a complete final that this run did not train (another stage, another config).

    A final found before its stage trained is adopted (a kill after publishing, before run.json
    knew); but with run.json lost, a run with another config would adopt the old run's weights.
    """
    found = (info.get("stage"), info.get("config_hash"))
    if found != (stage_name, config_hash):
        raise RuntimeError(
            f"{final_dir}: trained as stage {found[0]!r} with config {found[1]}, not as stage {stage_name!r} of "
            f"this run (config {config_hash}), so it is not adopted; move it away to train the stage here, or "
            "resume with the config it was trained with"
        )


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
