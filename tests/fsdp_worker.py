"""One rank of the FSDP2 test (`torchrun --nproc_per_node 2 tests/fsdp_worker.py <model> <out>`, gloo, CPU).

accelerate runs FSDP only on GPUs, so this drives PyTorch's own FSDP2 (`fully_shard`) directly: the tiny model
sharded over both ranks, one optimizer step on it (and the same step on a whole copy), then the project's
publishing of a stage's final from the shards, as `train/stages/training.py` does under FSDP: `gather_weights` on
every rank (a collective per parameter), `save_whole` and `publish_final` on the main process. Then the second
rank turns one value of its shard NaN, and each rank says what the divergence stop's check of the weights it holds
finds (`held_weights_finite`). It writes `<out>/rank<k>.json` (what it saw) and `<out>/final` (the published
final).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import AutoModelForCausalLM, AutoTokenizer

from core.weights import fingerprint, gather_weights, held_weights_finite, save_whole
from train.stages.training import publish_final


def sgd_step(model: torch.nn.Module, batch: torch.Tensor) -> None:
    """One plain SGD step on the language-modelling loss of `batch` (deterministic: no optimizer state)."""
    loss = model(input_ids=batch, labels=batch).loss
    loss.backward()
    with torch.no_grad():
        for param in model.parameters():
            param -= 1e-2 * param.grad
            param.grad = None


def main(model_path: str, out: Path) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    sharded = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    whole = copy.deepcopy(sharded)  # the same step without sharding: what the final must hold
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in sharded.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(sharded, mesh=mesh)
    local = sum(p.to_local().numel() for p in sharded.parameters())
    batch = torch.randint(0, sharded.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))
    sgd_step(sharded, batch)  # both ranks see the same batch: FSDP's averaged gradient is the whole model's
    sgd_step(whole, batch)
    found, weights = gather_weights(sharded.named_parameters(), keep=rank == 0)
    if rank == 0:
        tmp = out / "final.tmp"
        save_whole(whole.config, weights, AutoTokenizer.from_pretrained(model_path), tmp)
        publish_final(tmp, out / "final", {"stage": "fsdp", "final_fingerprints": [found]})
    finite_after_step = held_weights_finite(sharded)
    if rank == 1:
        with torch.no_grad():
            next(sharded.parameters()).to_local().view(-1)[0] = float("nan")
    (out / f"rank{rank}.json").write_text(json.dumps({
        "gathered": found, "whole": fingerprint(whole), "local_elements": local,
        "elements": sum(p.numel() for p in whole.parameters()),
        "held_finite": [finite_after_step, held_weights_finite(sharded)],
    }))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
