"""What a launch of many processes is allowed, checked before anything loads, and what it starts.

The launches themselves run in tests/engines/test_distributed.py; here the rules: the batch a step takes counts
the processes, what sharded weights cannot do, the multi-GPU preset refused on this CPU, the SLURM launcher
config, and the command a job starts its ranks with.
"""

from __future__ import annotations

import re

import pytest
from omegaconf import OmegaConf

from conf import CONF_DIR
from conf.errors import check_launch
from conf.schema import StageConfig
from core.checks import ConfigError
from core.distributed import Processes
from curriculum.plan import build_plan, grpo_batch, prompts_per_step
from curriculum.tasks import build_task
from train.launch.relaunch import launch_command
from train.settings import check_config, check_one_gpu_per_process

ZERO3_ENV = {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3",
             "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL": "true"}


@pytest.mark.parametrize(("processes", "prompts", "steps"), [
    # Logic-RL's 8 x 8 completions per device on one process: 8 prompts a step, 900 puzzles -> 113 steps
    (1, 8, 113),
    # each process takes its own 64 completions: 2 processes consume 16 prompts a step, half the steps
    (2, 16, 57),
    (4, 32, 29),
    (8, 64, 15),
])
def test_epochs_become_steps_by_the_processes_that_train_each_step(make_cfg, processes, prompts, steps):
    cfg = make_cfg("+curriculum=kk_logicrl")
    cfg.curriculum.stages = [StageConfig(name=f"{p}ppl", ppl=p, epochs=1, pool=900) for p in range(3, 8)]
    assert prompts_per_step(cfg.grpo, world_size=processes) == prompts
    assert {s.steps for s in build_plan(cfg, world_size=processes)} == {steps}


@pytest.mark.parametrize(("per_device", "accumulation", "processes", "prompts"), [
    (8, 8, 1, 8),  # the default on one GPU: 8 prompts x 8 completions
    (8, 8, 4, 32),  # the same settings on 4 GPUs: four times the prompts per step
    (8, 2, 4, 8),  # docs/many-gpus.md: 8 prompts x 8 completions per step on 4 GPUs
    (4, 4, 4, 8),  # the same with half the memory per device
    (2, 1, 8, 2),  # 8 GPUs of 2 completions: 16 completions, 2 prompts of 8
])
def test_prompts_per_step_is_per_device_x_accumulation_x_processes_over_generations(
        per_device, accumulation, processes, prompts):
    fields = {"per_device_train_batch_size": per_device, "gradient_accumulation_steps": accumulation,
              "num_generations": 8}
    batch = grpo_batch(fields, "grpo", processes)
    assert batch.prompts_per_step == prompts == per_device * accumulation * processes / 8
    # one optimizer step per generation batch, used once, whatever the processes: the importance ratio is 1
    assert (batch.steps_per_generation, batch.num_iterations) == (accumulation, 1)


@pytest.mark.parametrize("processes", [1, 2, 4])
def test_the_size_said_before_a_run_counts_every_process_completions_and_shares_validation(make_cfg, processes):
    """Each process generates its own per-device batch every step (the smoke recipe: 4 completions per process), as
    TRL's batch arithmetic counts them, while validation's puzzles are shared out over the processes, not repeated."""
    from eval.settings import validation_settings
    from train.run.start import run_size

    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke")
    task = build_task(cfg.task, fmt=str(cfg.prompt.fmt))
    plan = build_plan(cfg, processes, task=task)
    size = run_size(OmegaConf.to_container(cfg.grpo, resolve=True), plan,
                    validation_settings(cfg.eval, cfg.prompt, cfg.model, task), processes)
    steps = sum(stage.steps for stage in plan)
    assert (size.grpo_steps, size.train_completions) == (10, steps * 4 * processes)  # per_device_train_batch_size 4
    # eval.subsets [2ppl, 3ppl] of 4 puzzles, validated where `near` says (11 subset validations over the baseline
    # and 5 stages): the same 44 completions at any scale
    assert size.validation_completions == 11 * 4
    on = f" on {processes} processes" if processes > 1 else ""
    assert size.describe().startswith(f"size: 5 stages{on}; training 10 GRPO steps, {40 * processes} completions")


@pytest.mark.parametrize(("fields", "processes", "refused"), [
    # 2 completions a device cannot hold a group of 8 on one process (TRL refuses it) ...
    ({"per_device_train_batch_size": 2, "num_generations": 8}, 1, "grpo.num_generations"),
    # ... but 4 processes of 2 make a generation batch of 8: one group, as TRL accepts
    ({"per_device_train_batch_size": 2, "num_generations": 8}, 4, None),
    # a generation batch must be a whole number of rounds over every process (TRL's rule)
    ({"per_device_train_batch_size": 8, "generation_batch_size": 24}, 2, "grpo.generation_batch_size"),
    ({"per_device_train_batch_size": 8, "generation_batch_size": 32}, 2, None),
])
def test_trls_batch_rules_count_the_processes(fields, processes, refused):
    if refused is None:
        grpo_batch(fields, "grpo", processes)
    else:
        with pytest.raises(ConfigError, match=refused):
            grpo_batch(fields, "grpo", processes)


@pytest.mark.parametrize(("overrides", "processes", "env", "refused"), [
    # vLLM validation is one engine on one GPU: many processes validate through HF, sharded
    (["eval.backend=vllm"], Processes(0, 2), {}, "eval.backend: vllm validates on one GPU"),
    # ZeRO-3 shards the live weights: in-stage validation on them is refused, by the key that asks for it
    (["eval.every=5"], Processes(0, 2, sharded_by="DeepSpeed ZeRO-3"), ZERO3_ENV, "eval.every: in-stage"),
    (["+curriculum.stages.0.promote={accuracy: 0.8}"], Processes(0, 2, sharded_by="FSDP"),
     {"ACCELERATE_USE_FSDP": "true", "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT"}, "promote: in-stage"),
    # LoRA is merged on the main process, which holds a shard only
    (["+model.lora={r: 8}"], Processes(0, 2, sharded_by="DeepSpeed ZeRO-3"), ZERO3_ENV, "model.lora:"),
    # a ZeRO-3 launch that would save DeepSpeed shards, not a whole final the next stage loads
    ([], Processes(0, 2, sharded_by="DeepSpeed ZeRO-3"), {**ZERO3_ENV, "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL":
                                                           "false"}, "zero3_save_16bit_model"),
    # DDP on 2 processes with everything else as configured: accepted
    (["eval.every=5"], Processes(0, 2), {}, None),
])
def test_what_many_processes_cannot_do_is_refused_naming_the_key(make_cfg, monkeypatch, overrides, processes, env,
                                                                 refused):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke", *overrides)
    if refused is None:
        check_config(cfg, build_plan(cfg, processes.world_size), processes)
        return
    with pytest.raises(ConfigError, match=refused):
        check_config(cfg, build_plan(cfg, processes.world_size), processes)


def test_multi_gpu_is_refused_on_a_machine_without_cuda(make_cfg):
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=multi_gpu")
    with pytest.raises(ConfigError, match="^device: cuda, but this machine has no CUDA GPU"):
        check_config(cfg, build_plan(cfg, 4), Processes(0, 4))


@pytest.mark.parametrize(("env", "visible", "refused"), [
    ({}, 4, "CUDA_VISIBLE_DEVICES: 4 GPUs visible to one process (CUDA_VISIBLE_DEVICES unset)"),
    ({"CUDA_VISIBLE_DEVICES": "2,3"}, 2, "2 GPUs visible to one process (CUDA_VISIBLE_DEVICES=2,3)"),
    # accelerate launch --num_processes 1 runs the script itself: no LOCAL_RANK, so transformers counts every GPU
    ({"ACCELERATE_MIXED_PRECISION": "bf16"}, 8, "--num_processes 8 -m train"),
    ({"CUDA_VISIBLE_DEVICES": "1"}, 1, None),  # pinned to one GPU
    ({}, 0, None),  # a CPU
    ({"LOCAL_RANK": "1", "WORLD_SIZE": "4", "RANK": "1"}, 4, None),  # a rank of torchrun or accelerate launch
    ({"LOCAL_RANK": "0", "WORLD_SIZE": "1", "RANK": "0"}, 4, None),  # torchrun --nproc_per_node 1: MULTI_GPU
])
def test_several_gpus_visible_to_a_process_no_launcher_started_are_refused(env, visible, refused):
    """transformers' n_gpu counts every visible GPU when accelerate sees no launch (no LOCAL_RANK); TRL refuses
    the DataParallel that follows, but only once its trainer exists."""
    if refused is None:
        check_one_gpu_per_process(env, visible)
        return
    with pytest.raises(ConfigError, match=re.escape(refused)):
        check_one_gpu_per_process(env, visible)


def test_several_visible_gpus_are_refused_with_the_config_before_anything_loads(make_cfg, monkeypatch):
    """read_settings is what `python -m train` runs before the run directory is locked and any model loads: the
    environment it reads is this process's, the GPU count torch's (4 here: this CPU has none to count)."""
    import torch

    from train.settings import read_settings

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    for name in ("LOCAL_RANK", "WORLD_SIZE", "RANK", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke")
    with pytest.raises(ConfigError, match="^CUDA_VISIBLE_DEVICES: 4 GPUs visible to one process"):
        read_settings(cfg)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert read_settings(cfg).plan, "one visible GPU: accepted"


def test_the_slurm_launcher_asks_for_a_gpu_per_process_and_requeues(make_cfg):
    cfg = make_cfg("+curriculum=kk_ladder", "hydra/launcher=submitit_slurm_multi_gpu", "launch=accelerate",
                   "launch.processes=4", hydra_config=True)
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert (launcher["gpus_per_node"], launcher["tasks_per_node"], launcher["nodes"]) == (4, 1, 1)
    assert launcher["max_num_timeout"] > 0, "a preempted job is requeued"
    assert launcher["_target_"].endswith("SlurmLauncher")


def test_a_job_starts_its_ranks_through_accelerate_with_the_launch_file(tmp_path):
    launch = {"launcher": "accelerate", "processes": 4, "accelerate_config": "zero3"}
    command = launch_command(launch, ["+curriculum=kk_ladder", "seed=3"], tmp_path)
    assert command[1:6] == ["-m", "train.launch.agent", str(tmp_path / "error.txt"), "4", "accelerate"], \
        "run in this project's agent, which records a rank killed by a signal in error.txt"
    assert command[6:] == [
        "--config_file", str(CONF_DIR / "accelerate" / "zero3.yaml"), "--num_processes", "4",
        "--main_process_port", "0",  # accelerate picks a free port: two jobs on one machine never share 29500
        "-m", "train", "+curriculum=kk_ladder", "seed=3",
        "launch.launcher=null", "launch.gpus=null",  # the ranks train on what they see; they start no ranks
        f"hydra.run.dir={tmp_path}",  # the job's directory: a requeued job's ranks find its run.json there
        "hydra.output_subdir=null",  # the job keeps its own Hydra record there
    ]
    assert (CONF_DIR / "accelerate" / "zero3.yaml").is_file()


def test_a_launch_file_that_does_not_exist_is_refused_by_name():
    with pytest.raises(ConfigError, match="launch.accelerate_config: 'zero4' is not a launch file"):
        check_launch({"launcher": "accelerate", "processes": 4, "accelerate_config": "zero4", "gpus": None})


def test_every_stage_syncs_weights_to_a_vllm_server_through_the_configured_port(make_cfg, tmp_path):
    """Each stage closes its weight-sync group as it ends (train/stages/training.py), so the next stage's
    trainer opens its own on the same port: no stage is given another."""
    from train.stages.grpo import grpo_config

    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke", "+grpo.use_vllm=true", "+grpo.vllm_mode=server",
                   "+grpo.vllm_group_port=52000")
    grpo = OmegaConf.to_container(cfg.grpo, resolve=True)
    ports = [grpo_config(grpo, stage, tmp_path, seed=0, lora=None).vllm_group_port for stage in build_plan(cfg)]
    assert ports == [52000] * 5


def test_only_the_main_process_opens_a_wandb_run(tmp_path):
    """One wandb run per curriculum run: a rank other than the main one gets a tracker that sends nothing."""
    from core.tracker import NullTracker, open_tracker

    logger = {"backend": "wandb", "project": "kk", "mode": "offline"}
    tracker = open_tracker(logger, tmp_path, name=tmp_path.name, group=None, job_type="train", run_id="run-1",
                           config={}, writes=False)
    assert isinstance(tracker, NullTracker)
    assert not (tmp_path / "wandb").exists(), "nothing written by the other rank"


def _launch_env(name: str) -> dict:
    """The environment `accelerate launch --config_file conf/accelerate/<name>.yaml` gives its processes,
    prepared by accelerate's own launch code (which runs on a CPU; only starting the processes needs GPUs)."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    args = launch_command_parser().parse_args(["--config_file", str(CONF_DIR / "accelerate" / f"{name}.yaml"),
                                               "-m", "train"])
    args, defaults, _ = _validate_launch_command(args)
    if not args.use_deepspeed:
        return prepare_multi_gpu_env(args)
    args.deepspeed_fields_from_accelerate_config = ",".join(defaults.deepspeed_config)  # as launch_command sets it
    return prepare_deepspeed_cmd_env(args)[1]


@pytest.mark.parametrize(("name", "sharded_by"), [
    ("ddp", None), ("zero2", None),  # every rank holds the whole model
    ("zero3", "DeepSpeed ZeRO-3"), ("fsdp", "FSDP"),  # the ranks hold shards
])
def test_the_launch_files_shard_as_named_and_save_whole_finals(name, sharded_by):
    """What the runner reads of a launch (core.distributed) from the env accelerate itself prepares for each file."""
    from core.distributed import weight_sharding, whole_final_problem

    env = _launch_env(name)
    assert weight_sharding(env) == sharded_by
    assert whole_final_problem(env) is None, "a stage's final is one whole checkpoint under every shipped file"


def test_a_zero3_launch_that_would_save_shards_is_named():
    from core.distributed import whole_final_problem

    env = {**_launch_env("zero3"), "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL": "false"}
    assert whole_final_problem(env).startswith("accelerate config: zero3_save_16bit_model must be true")


def test_one_process_starts_no_process_group():
    import torch.distributed

    from core.distributed import SINGLE, start_processes

    assert start_processes() == SINGLE and not torch.distributed.is_initialized()
