"""What a CUDA machine trains with, shown on this CPU through what the code reads: torch.cuda's answers
(monkeypatched as a given card would give them) and the environment `accelerate launch` sets.

bf16 goes to cards that compute in it natively (compute capability 8.0 and up, where vLLM also takes it);
8-bit AdamW is the default only where bitsandbytes can step the launch's parameters (one process, DDP),
and naming it under FSDP or DeepSpeed is refused before anything loads.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from core.checks import ConfigError
from core.distributed import Processes
from core.models import cuda_has_bf16, device_settings
from curriculum.plan import build_plan
from train.gpu.measure import bf16_check
from train.settings import check_config

FSDP_ENV = {"ACCELERATE_USE_FSDP": "true", "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT"}
ZERO2_ENV = {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"}
ZERO3_ENV = {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3",
             "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL": "true"}


def fake_card(monkeypatch, capability: tuple[int, int], native_bf16: bool) -> None:
    """torch.cuda as a card of `capability` answers: bf16 with emulation always (torch's default counts it),
    without emulation `native_bf16`."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported",
                        lambda including_emulation=True: including_emulation or native_bf16)


@pytest.mark.parametrize(("card", "capability", "native_bf16", "bf16"), [
    ("A100", (8, 0), True, True),  # Ampere: bf16 in hardware, vLLM takes it
    ("H100", (9, 0), True, True),
    ("T4", (7, 5), False, False),  # bf16 only emulated: torch.cuda.is_bf16_supported() alone said True
    ("V100", (7, 0), False, False),
    # a torch that called a 7.5 card native would still hand vLLM a bf16 it refuses below 8.0
    ("T4, torch says native", (7, 5), True, False),
    ("A100, torch says emulated only", (8, 0), False, False),
])
def test_bf16_only_where_the_card_computes_it_natively(monkeypatch, card, capability, native_bf16, bf16):
    fake_card(monkeypatch, capability, native_bf16)
    settings = device_settings({})
    assert cuda_has_bf16() is bf16, card
    assert settings["bf16"] is bf16, card
    # without bf16 the project's rule is float32, never float16 (no loss scale is set)
    assert settings["inference_dtype"] == (torch.bfloat16 if bf16 else torch.float32), card
    check = bf16_check()
    assert check["ok"] is bf16 and f"compute capability {capability[0]}.{capability[1]}" in check["detail"], card


def test_no_cuda_no_bf16_whatever_torch_says_of_bf16(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    assert not cuda_has_bf16()


@pytest.mark.parametrize(("env", "optim"), [
    ({}, "adamw_8bit"),  # one process: 8-bit AdamW
    ({"LOCAL_RANK": "0", "WORLD_SIZE": "4"}, "adamw_8bit"),  # DDP (torchrun or ddp.yaml): each rank whole
    ({"ACCELERATE_USE_FSDP": "false"}, "adamw_8bit"),  # accelerate's own "not FSDP"
    (FSDP_ENV, "adamw_torch"),  # DTensor shards: bitsandbytes has no DTensor support
    (ZERO2_ENV, "adamw_torch"),  # flat partitions at any ZeRO stage
    (ZERO3_ENV, "adamw_torch"),
])
def test_8bit_adamw_is_the_cuda_default_only_where_bitsandbytes_can_step_it(monkeypatch, env, optim):
    fake_card(monkeypatch, (8, 0), True)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: object() if name == "bitsandbytes" else real_find_spec(name, *args))
    assert device_settings(env)["optim"] == optim


@pytest.mark.parametrize(("overrides", "env", "processes", "refused"), [
    (["+grpo.optim=adamw_8bit"], FSDP_ENV, Processes(0, 2, sharded_by="FSDP"),
     "grpo.optim: adamw_8bit is a bitsandbytes optimizer, and FSDP hands the optimizer DTensor shards"),
    (["+grpo.optim=paged_adamw_8bit"], ZERO2_ENV, Processes(0, 2),
     "grpo.optim: paged_adamw_8bit is a bitsandbytes optimizer, and DeepSpeed ZeRO hands"),
    # a stage's own override is named where it was written
    (["stage_overrides={3ppl: {optim: adamw_bnb_8bit}}"], ZERO3_ENV, Processes(0, 2, sharded_by="DeepSpeed ZeRO-3"),
     "stage_overrides.3ppl.optim: adamw_bnb_8bit is a bitsandbytes optimizer"),
    # the refusal says what to use instead, in one line
    (["+grpo.optim=adamw_8bit"], ZERO2_ENV, Processes(0, 2), r"use grpo.optim=adamw_torch \(DDP keeps"),
    (["+grpo.optim=adamw_torch"], FSDP_ENV, Processes(0, 2, sharded_by="FSDP"), None),  # plain AdamW: fine
    (["+grpo.optim=adamw_torch_8bit"], ZERO2_ENV, Processes(0, 2), None),  # torchao's, not bitsandbytes'
    ([], ZERO2_ENV, Processes(0, 2), None),  # nothing set: the default is AdamW there
])
def test_a_bitsandbytes_optimizer_under_fsdp_or_deepspeed_is_refused_by_its_key(make_cfg, monkeypatch, overrides,
                                                                                env, processes, refused):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke", "eval.every=0", *overrides)
    plan = build_plan(cfg, processes.world_size)
    if refused is None:
        check_config(cfg, plan, processes)
        return
    with pytest.raises(ConfigError, match=refused) as raised:
        check_config(cfg, plan, processes)
    assert "\n" not in str(raised.value)


def test_multi_gpu_keeps_8bit_adamw_for_its_ddp_launch_and_is_told_under_zero3(make_cfg, monkeypatch):
    """experiment=multi_gpu names adamw_8bit for the DDP launch its header shows; on ZeRO-3 it is refused
    by name (here past the CUDA check, which a CPU would fail first)."""
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=multi_gpu")
    assert cfg.grpo.optim == "adamw_8bit"
    from train.settings import check_launch_optimizer, optimizers_set

    check_launch_optimizer({}, optimizers_set(cfg, build_plan(cfg, 4)))
    with pytest.raises(ConfigError, match="^grpo.optim: adamw_8bit is a bitsandbytes optimizer"):
        check_launch_optimizer(ZERO3_ENV, optimizers_set(cfg, build_plan(cfg, 4)))
