"""vLLM on a machine without CUDA runs its CPU attention, which refuses some head sizes ("Unsupported CPU attention
configuration: head_dim=16", raised once the model has loaded). Set explicitly (`eval.backend=vllm`, colocated
`grpo.use_vllm`), it is refused before anything loads, in one line naming the key, the head size and what to use.
"""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf

from core.checks import ConfigError
from eval.settings import check_cpu_head_size, planned_head_size
from tests.conftest import run_cli

TINY_REFUSED = ("eval.backend: vllm, but vLLM's CPU attention (no CUDA here) takes head sizes [32, 64, 80, 96, 112, "
                "128, 160, 192, 224, 256, 512], not this model's 16: use eval.backend=auto or hf, or a model with "
                "heads of 64 such as model=tiny_vllm")
ROLLOUTS_REFUSED = "grpo.use_vllm: colocated vLLM rollouts, but vLLM's CPU attention (no CUDA here) takes head sizes"

# (the command after `python -m`, the line it must end with)
TRAIN_CLI = [
    # the tiny model's heads are 16: unchecked, a RuntimeError from vLLM after the model loads
    (["+curriculum=kk_ladder", "experiment=smoke", "eval.backend=vllm"], f"config error: {TINY_REFUSED}"),
    # TRL's colocated engine runs the same kernel
    (["+curriculum=kk_ladder", "experiment=smoke", "+grpo.use_vllm=true", "+grpo.vllm_mode=colocate"],
     f"config error: {ROLLOUTS_REFUSED}"),
]


def refused_in_one_line(done, line: str) -> None:
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith(line), done.stderr[-2000:]
    assert [row for row in done.stderr.splitlines() if "config error" in row] == [done.stderr.strip().splitlines()[-1]]
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.run
@pytest.mark.skipif(torch.cuda.is_available(), reason="vLLM's CPU attention is what is refused")
@pytest.mark.parametrize(("args", "line"), TRAIN_CLI, ids=["eval-backend", "rollouts"])
def test_vllm_on_heads_its_cpu_attention_refuses_leaves_no_run_folder(tmp_path, args, line):
    run_dir = tmp_path / "run"
    done = run_cli("train", *args, f"paths.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={run_dir}", timeout=180)
    refused_in_one_line(done, line)
    assert not run_dir.exists(), "no run folder"
    assert not (tmp_path / "cache").exists(), "no model built: the head size is read from model.tiny"


@pytest.mark.run
@pytest.mark.skipif(torch.cuda.is_available(), reason="vLLM's CPU attention is what is refused")
def test_python_m_eval_refuses_it_before_the_model_is_built(tmp_path):
    """(Hydra makes `python -m eval`'s own folder before its checks run, as for every eval.* refusal.)"""
    done = run_cli("eval", "model=tiny", "experiment=smoke", "eval.backend=vllm",
                   f"paths.output_dir={tmp_path / 'out'}", f"paths.cache_dir={tmp_path / 'cache'}", timeout=180)
    refused_in_one_line(done, f"config error: {TINY_REFUSED}")
    assert not (tmp_path / "cache").exists(), "no model built or loaded"


def tiny(hidden: int, heads: int) -> dict:
    return {"source": "tiny", "id": None, "tiny": {"hidden_size": hidden, "num_attention_heads": heads}}


def hub_dir(tmp_path, **config) -> dict:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return {"source": "hub", "id": str(tmp_path)}


@pytest.mark.parametrize(("eval_backend", "grpo", "model", "refused"), [
    ("vllm", {}, tiny(64, 4), TINY_REFUSED),  # model=tiny: 64 / 4 = 16
    ("vllm", {}, tiny(128, 2), None),  # model=tiny_vllm: 64, which vLLM's CPU attention runs
    ("auto", {}, tiny(64, 4), None),  # auto turns to HF by itself
    ("hf", {"use_vllm": True}, tiny(64, 4), ROLLOUTS_REFUSED),  # TRL's default vllm_mode: colocate
    ("hf", {"use_vllm": True, "vllm_mode": "server"}, tiny(64, 4), None),  # the server's engine runs elsewhere
    ("hf", {"use_vllm": False}, tiny(64, 4), None),
    # a checkpoint directory: its config.json, head_dim first (it need not be hidden / heads)
    ("vllm", {}, "hub:head_dim=16,hidden_size=128,num_attention_heads=2", "not this model's 16"),
    ("vllm", {}, "hub:hidden_size=576,num_attention_heads=9", None),  # SmolLM2-135M: 64
    ("vllm", {}, {"source": "hub", "id": "no-org/not-in-any-cache"}, None),  # not known before it loads: unchecked
    ("vllm", {}, {"source": "smollm2", "id": None}, None),  # built on first use: unchecked
])
def test_the_head_size_is_read_before_anything_loads(tmp_path, monkeypatch, eval_backend, grpo, model, refused):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    if isinstance(model, str):
        model = hub_dir(tmp_path, **{k: int(v) for k, v in (kv.split("=") for kv in model[4:].split(","))})
    eval_cfg = OmegaConf.create({"backend": eval_backend})
    if refused is None:
        check_cpu_head_size(eval_cfg, grpo, model)
        return
    with pytest.raises(ConfigError, match=refused.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        check_cpu_head_size(eval_cfg, grpo, model)


def test_with_cuda_any_head_size_goes_to_vllm(monkeypatch):
    """CUDA's attention backends take any head size (FlexAttention), as `auto` also assumes."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    check_cpu_head_size(OmegaConf.create({"backend": "vllm"}), {"use_vllm": True}, tiny(64, 4))


def test_a_checkpoint_given_to_python_m_eval_is_read_over_the_model_config(tmp_path):
    checkpoint = hub_dir(tmp_path, hidden_size=64, num_attention_heads=4)["id"]
    assert planned_head_size(tiny(128, 2), checkpoint) == 16
    assert planned_head_size(tiny(128, 2)) == 64
