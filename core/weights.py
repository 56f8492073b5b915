"""A model's weights whole and in float32, whatever engine trains them: DeepSpeed ZeRO, FSDP2, or none. DeepSpeed
keeps float32 master weights in its optimizer (the module's bfloat16 would round away GRPO's ~1e-6 updates); ZeRO-3
and FSDP2 shard each parameter (gathered name by name, a collective); once a ZeRO-3 TrainingArguments exists every
`from_pretrained` loads partitioned unless `zero3_init_paused`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch


@contextmanager
def zero3_init_paused() -> Iterator[None]:
    """`from_pretrained` inside the block loads a whole model on this process, even after a ZeRO-3 trainer exists."""
    from transformers.integrations import deepspeed as hf_deepspeed

    registered = hf_deepspeed._hf_deepspeed_config_weak_ref
    hf_deepspeed._hf_deepspeed_config_weak_ref = None
    try:
        yield
    finally:
        hf_deepspeed._hf_deepspeed_config_weak_ref = registered


def held_here(param: torch.nn.Parameter) -> torch.Tensor:
    """The part of `param` this process holds: its ZeRO-3 partition, its FSDP2 shard, else the parameter whole."""
    if hasattr(param, "ds_tensor"):  # DeepSpeed ZeRO-3: the flat partition the optimizer's step writes
        return param.ds_tensor
    if hasattr(param, "to_local"):  # a DTensor: FSDP2's shard of it
        return param.to_local()
    return param


def held_weights_finite(model: torch.nn.Module) -> bool:
    """Whether every weight this process holds is finite (no collective); one device sync for the whole model."""
    with torch.no_grad():
        flags = [torch.isfinite(held_here(param)).all() for param in model.parameters()]
        return bool(torch.stack(flags).all()) if flags else True


def fingerprint(model: torch.nn.Module) -> str:
    """A short digest of every parameter's exact float32 bytes (not sums: independent of reduction order); a PEFT
    model's base alone, under the plain names. A collective where sharded: call it on every rank."""
    base = ((name.removeprefix("base_model.model.").replace(".base_layer.", "."), param)
            for name, param in model.named_parameters() if ".lora_" not in name)
    return gather_weights(base, keep=False)[0]


def weights_fingerprint(named_tensors) -> str:
    """`fingerprint` of (name, tensor) pairs: a model's parameters, or a state dict's items."""
    return gather_weights(named_tensors, keep=False)[0]


def gather_weights(named_parameters, *, keep: bool) -> tuple[str, dict[str, torch.Tensor] | None]:
    """The fingerprint of `named_parameters` whole in float32 (each its engine's master copy, or gathered shards)
    and, with `keep`, the whole tensors by name; a collective where sharded, holding one parameter at a time."""
    digest, kept = hashlib.sha256(), {}
    for name, param in sorted(named_parameters, key=lambda kv: kv[0]):
        tensor = _whole(param).detach().to("cpu", torch.float32).contiguous()
        digest.update(name.encode())
        digest.update(tensor.numpy().tobytes())
        if keep:
            kept[name] = tensor
    return digest.hexdigest()[:16], kept if keep else None


def _whole(param: torch.nn.Parameter) -> torch.Tensor:
    if hasattr(param, "ds_id") or hasattr(param, "_hp_mapping"):  # DeepSpeed's: its master copy, else its partitions
        master = _deepspeed_master(param)
        if master is not None:
            return master
        if hasattr(param, "ds_id"):  # ZeRO-3 partitions with no optimizer behind them (yet, or a frozen reference)
            import deepspeed

            with deepspeed.zero.GatheredParameters([param]):
                return param.data.clone()
    if hasattr(param, "full_tensor"):  # a DTensor: FSDP2's shard of it
        return param.full_tensor()
    return param


def _deepspeed_master(param: torch.nn.Parameter) -> torch.Tensor | None:
    """The float32 master weights DeepSpeed's optimizer holds for `param` (gathered), None where it holds none."""
    if getattr(param, "_z3_optimizer", None) is None and not hasattr(param, "_hp_mapping"):
        return None
    from deepspeed.utils import safe_get_full_fp32_param

    return safe_get_full_fp32_param(param)


def checkpoint_weights(checkpoint: Path, names: list[str]) -> dict[str, torch.Tensor] | None:
    """The float32 master weights `names` from a DeepSpeed checkpoint's optimizer files (no engine), else None."""
    if not (checkpoint / "latest").is_file():  # DeepSpeed's save_checkpoint names its tag there
        return None
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    saved = get_fp32_state_dict_from_zero_checkpoint(str(checkpoint))
    return {name: saved[name].float() for name in names}


def saved_parameters(checkpoint: str | Path, names) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, float32 tensor) for each of `names` in order, read one at a time from a checkpoint's safetensors."""
    from safetensors import safe_open

    folder = _local_folder(checkpoint)
    index = folder / "model.safetensors.index.json"
    files = json.loads(index.read_text())["weight_map"] if index.is_file() else {}
    for name in sorted(names):
        with safe_open(folder / files.get(name, "model.safetensors"), framework="pt") as saved:
            yield name, saved.get_tensor(name).to(torch.float32)


def _local_folder(checkpoint: str | Path) -> Path:
    """A checkpoint's folder here: itself, or a hub id's snapshot in the local cache (the trainer loaded it)."""
    if Path(checkpoint).is_dir():
        return Path(checkpoint)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(str(checkpoint), local_files_only=True))


def save_whole(config, weights: dict[str, torch.Tensor], tokenizer, folder: Path) -> None:
    """A checkpoint of `weights` as a float32 model of `config`'s architecture, built on this process alone."""
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING

    with zero3_init_paused():
        model = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)].from_pretrained(None, config=config, state_dict=weights,
                                                                           dtype=torch.float32)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
