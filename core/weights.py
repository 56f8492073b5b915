"""A model's weights whole and in float32, whatever engine trains them: DeepSpeed ZeRO, FSDP2, or none.

- DeepSpeed under mixed precision keeps the float32 master weights in its optimizer, the module in bfloat16,
  where GRPO's updates (~1e-6 of a weight) round away: `gather_weights` reads the master copy.
- ZeRO-3 and FSDP2 shard each parameter: `gather_weights` gathers them name by name (a collective), `held_here`
  is the part a rank holds, which the check after every step reads.
- Once a ZeRO-3 TrainingArguments exists, every `from_pretrained` loads partitioned (a collective): a whole model
  loaded on one rank steps outside it (`zero3_init_paused`).
- A DeepSpeed trainer checkpoint holds the master weights only in its optimizer files: `checkpoint_weights` reads
  them without an engine, so a stage killed while publishing is published from its checkpoint.
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
    """`from_pretrained` inside the block loads a whole model on this process, never ZeRO-3 partitions, even after
    a trainer registered DeepSpeed's ZeRO-3 config; the registration is restored after."""
    from transformers.integrations import deepspeed as hf_deepspeed

    registered = hf_deepspeed._hf_deepspeed_config_weak_ref
    hf_deepspeed._hf_deepspeed_config_weak_ref = None
    try:
        yield
    finally:
        hf_deepspeed._hf_deepspeed_config_weak_ref = registered


def held_here(param: torch.nn.Parameter) -> torch.Tensor:
    """The part of `param` this process holds: its ZeRO-3 partition, its FSDP2 shard, else the parameter whole
    (a sharded module's own tensor holds nothing, so a check of it would pass whatever the weights are)."""
    if hasattr(param, "ds_tensor"):  # DeepSpeed ZeRO-3: the flat partition the optimizer's step writes
        return param.ds_tensor
    if hasattr(param, "to_local"):  # a DTensor: FSDP2's shard of it
        return param.to_local()
    return param


def held_weights_finite(model: torch.nn.Module) -> bool:
    """Whether every weight this process holds (`held_here`) is finite: no collective, so a sharded model's ranks
    must combine their answers. One device sync for the whole model: this runs after every optimizer step."""
    with torch.no_grad():
        flags = [torch.isfinite(held_here(param)).all() for param in model.parameters()]
        return bool(torch.stack(flags).all()) if flags else True


def fingerprint(model: torch.nn.Module) -> str:
    """A short digest of every parameter's exact float32 bytes (not sums: independent of reduction order), equal
    exactly when the weights are equal. A PEFT model is fingerprinted without its adapters, under the plain names:
    its base, which a LoRA stage's reference is. Gathered as `gather_weights` does: call it on every rank."""
    base = ((name.removeprefix("base_model.model.").replace(".base_layer.", "."), param)
            for name, param in model.named_parameters() if ".lora_" not in name)
    return gather_weights(base, keep=False)[0]


def weights_fingerprint(named_tensors) -> str:
    """`fingerprint` of (name, tensor) pairs: a model's parameters, or a state dict's items."""
    return gather_weights(named_tensors, keep=False)[0]


def gather_weights(named_parameters, *, keep: bool) -> tuple[str, dict[str, torch.Tensor] | None]:
    """The fingerprint of `named_parameters` whole in float32 and, with `keep`, the whole tensors by name (the main
    process keeps them to publish). Each parameter in name order is its engine's master copy where it keeps one
    (DeepSpeed), the gathered shards where the weights are sharded (ZeRO-3, FSDP2), else itself: a collective for
    sharded or partitioned weights, so every rank calls it, holding one whole parameter at a time."""
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
    """The float32 master weights of the parameters `names` in a DeepSpeed trainer checkpoint's optimizer files
    (read without an engine, on this process alone), or None for a checkpoint not DeepSpeed's."""
    if not (checkpoint / "latest").is_file():  # DeepSpeed's save_checkpoint names its tag there
        return None
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    saved = get_fp32_state_dict_from_zero_checkpoint(str(checkpoint))
    return {name: saved[name].float() for name in names}


def saved_parameters(checkpoint: str | Path, names) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor in float32) for each of `names`, in name order, read a tensor at a time from a checkpoint's
    safetensors files (one, or sharded with an index): a local folder or a model in the hub's cache."""
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


def load_whole(config, state_dict: dict[str, torch.Tensor]):
    """A whole float32 model of `config`'s architecture holding `state_dict`, on this process alone."""
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING

    with zero3_init_paused():
        return MODEL_FOR_CAUSAL_LM_MAPPING[type(config)].from_pretrained(None, config=config, state_dict=state_dict,
                                                                          dtype=torch.float32)


def save_whole(config, weights: dict[str, torch.Tensor], tokenizer, folder: Path) -> None:
    """A checkpoint `from_pretrained` loads: `weights` as a float32 model of `config`'s architecture, and the
    tokenizer."""
    load_whole(config, weights).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
