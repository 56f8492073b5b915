"""Each private member of TRL 1.16 (and of transformers' Trainer) the project relies on, checked against the
installed TRL through the one function that touches it (core/trl_internals.py): should an upgrade rename a member
or change what it does, the test named after it fails, before any run does.

Kept cheap: TRL's own methods run on stand-ins where only the member's part of them matters; the tiny model's
trainers are built where TRL's construction is the behaviour (the reference), and trained one step for the batch
TRL logs.
"""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainerCallback, TrainingArguments
from trl import GRPOConfig, GRPOTrainer

from core.models import resolve_model
from core.trl_internals import (
    load_checkpoint_weights,
    logged_batch,
    mark_weights_asleep,
    mark_weights_loaded,
    point_reference_at,
    trl_engine_names,
)
from core.weights import fingerprint
from eval.vllm_engine import process_kept
from tests.conftest import compose_cfg


@pytest.fixture(scope="module")
def tiny_path(cache_dir) -> str:
    return resolve_model(compose_cfg(cache_dir, "experiment=smoke").model, cache_dir)


def grpo_args(tmp_path, **fields) -> GRPOConfig:
    # activation_checkpointing named: left unset, TRL's default for the old name (gradient_checkpointing) warns
    return GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", num_generations=2,
                      per_device_train_batch_size=2, max_completion_length=4, activation_checkpointing=False,
                      **fields)


def first(completions, **kwargs):
    return [1.0] * len(completions)


def second(completions, **kwargs):
    return [0.0] * len(completions)


class Rollout(Exception):
    """Raised where a stand-in engine would generate: what TRL did before it is the point."""


def test_load_from_checkpoint_loads_a_checkpoints_weights_into_the_trainers_model(tiny_path, tmp_path):
    """transformers' `Trainer._load_from_checkpoint`: a stage at its budget is published from its checkpoint."""
    model = AutoModelForCausalLM.from_pretrained(tiny_path)
    saved = fingerprint(model)
    model.save_pretrained(tmp_path / "checkpoint-2")
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
    trainer = Trainer(model=model, args=TrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True,
                                                          report_to="none"))
    assert fingerprint(trainer.model) != saved, "the control: the trainer's weights differ before the load"
    load_checkpoint_weights(trainer, str(tmp_path / "checkpoint-2"))
    assert fingerprint(trainer.model) == saved


class BatchAtLog(TrainerCallback):
    """What the bound logged batch holds at each step's log line (as train/tracking.py reads it there)."""

    def __init__(self):
        self.batch, self.seen = None, []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "train_runtime" not in logs:
            self.seen.append({key: list(self.batch[key]) for key in ("prompt", "completion", "advantages")}
                             | {"rewards": {name: list(values) for name, values in self.batch["rewards"].items()}})


def test_logs_holds_the_steps_batch_before_its_log_line(tiny_path, tmp_path):
    """GRPOTrainer's `_logs`: bound once, before training, it holds each step's completions at its log line."""
    seen = BatchAtLog()
    args = grpo_args(tmp_path, max_steps=1, logging_steps=1, save_strategy="no")
    trainer = GRPOTrainer(model=tiny_path, reward_funcs=[first, second], args=args,
                          train_dataset=Dataset.from_dict({"prompt": ["Zoey said", "Ethan said"]}),
                          processing_class=AutoTokenizer.from_pretrained(tiny_path, padding_side="left"),
                          callbacks=[seen])
    seen.batch = logged_batch(trainer)
    assert seen.batch is not None, "TRL keeps the batch in the layout rollout sampling reads"
    trainer.train()
    (batch,) = seen.seen
    assert len(batch["prompt"]) == 2 and len(set(batch["prompt"])) == 1, "one group: a prompt, num_generations times"
    assert len(batch["completion"]) == 2 and len(batch["advantages"]) == 2
    assert batch["rewards"] == {"first": [1.0, 1.0], "second": [0.0, 0.0]}, "each reward function's, by its name"


@pytest.mark.parametrize(("trainer", "found"), [
    (SimpleNamespace(), False),  # a trainer that logs no batch (SFT): sampling is off
    (SimpleNamespace(_logs={"prompt": [], "completion": []}), False),  # another layout: never misread
    (SimpleNamespace(_logs={"prompt": [], "completion": [], "rewards": {}, "advantages": []}), True),
])
def test_a_logged_batch_is_found_only_in_the_layout_it_is_read_in(trainer, found):
    assert (logged_batch(trainer) is not None) == found


class Generation:
    """TRL's VLLMGeneration as far as `_generate_single_turn` calls it."""

    def __init__(self):
        self.calls = []

    def sync_weights(self):
        self.calls.append("sync_weights")

    def generate(self, **kwargs):
        self.calls.append("generate")
        raise Rollout


@pytest.mark.parametrize(("marked_at", "step", "calls"), [
    (None, 3, ["sync_weights", "generate"]),  # as TRL starts (-1): the first rollout pushes the weights
    (3, 3, ["generate"]),  # validation pushed this step's weights and recorded it: TRL does not push them again
    (3, 4, ["sync_weights", "generate"]),  # a later step: the engine holds old weights, TRL pushes the new
])
def test_last_loaded_step_decides_whether_a_rollout_pushes_the_weights(marked_at, step, calls):
    """GRPOTrainer's `_last_loaded_step`, as `_generate_single_turn` reads it."""
    trainer = SimpleNamespace(use_vllm=True, vllm_generation=Generation(), _last_loaded_step=-1,
                              state=SimpleNamespace(global_step=marked_at),
                              accelerator=SimpleNamespace(device="cpu", is_main_process=True),
                              args=SimpleNamespace(report_to=[]))
    if marked_at is not None:
        mark_weights_loaded(trainer)
    trainer.state.global_step = step
    with pytest.raises(Rollout):
        GRPOTrainer._generate_single_turn(trainer, [[1, 2]], None, {}, 1)
    assert trainer.vllm_generation.calls == calls


class FakeLLM:
    """vLLM's LLM as TRL's colocated generation calls it: every call recorded, generation refused."""

    def __init__(self, **arguments):
        self.arguments, self.calls = arguments, []

    def sleep(self, level):
        self.calls.append(f"sleep {level}")

    def wake_up(self, tags=None):
        self.calls.append(f"wake_up {tags}")

    def generate(self, prompts, sampling_params, use_tqdm):
        self.calls.append("generate")
        raise Rollout


@contextmanager
def engine_replaced(engine):
    """TRL's `LLM` replaced by `engine` for the block, as colocated_engine_setup replaces it."""
    names = trl_engine_names()
    started, names["LLM"] = names["LLM"], engine
    try:
        with process_kept(rng=False):  # TRL writes the launcher variables into os.environ
            yield
    finally:
        names["LLM"] = started


def colocated_generation(sleep_mode: bool):
    """TRL's own VLLMGeneration in colocate mode, started on stand-ins of a model and an accelerator."""
    model = torch.nn.Linear(1, 1)
    model.name_or_path = "stages/1-a/final"
    accelerator = SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=None), num_processes=1, process_index=0,
                                  local_process_index=0, is_main_process=True, wait_for_everyone=lambda: None)
    generation_class = trl_engine_names()["VLLMGeneration"]
    return generation_class(model=model, accelerator=accelerator, processing_class=None, mode="colocate",
                            enable_sleep_mode=sleep_mode)


def test_the_llm_in_trl_engine_names_is_what_trl_starts_its_colocated_engine_with():
    """`VLLMGeneration._init_vllm`'s globals: their `LLM` is vLLM's, and TRL starts its engine through that name."""
    from vllm import LLM

    assert trl_engine_names()["LLM"] is LLM, "untouched, TRL would start vLLM's own engine"
    with engine_replaced(FakeLLM):
        generation = colocated_generation(sleep_mode=False)
    assert isinstance(generation.llm, FakeLLM), "TRL took the engine put in its place"
    assert generation.llm.arguments["model"] == "stages/1-a/final"
    assert trl_engine_names()["LLM"] is LLM, "and the name is restored after"


@pytest.mark.parametrize(("weights", "calls"), [
    ("started", ["sync_weights", "wake_up ['kv_cache']", "generate"]),  # TRL sleeps a new engine: pushed first
    ("pushed", ["wake_up ['kv_cache']", "generate"]),  # awake since TRL's last push: generated from as they are
    ("marked", ["sync_weights", "wake_up ['kv_cache']", "generate"]),  # validation slept it again: pushed again
])
def test_llm_weights_sleeping_decides_whether_generate_pushes_the_weights(weights, calls):
    """VLLMGeneration's `_llm_weights_sleeping`, as `generate` reads it under sleep mode."""
    with engine_replaced(FakeLLM):
        generation = colocated_generation(sleep_mode=True)
    assert generation.llm.calls == ["sleep 2"], "TRL puts a new engine to sleep at once"
    generation.llm.calls = []
    generation.sync_weights = lambda: generation.llm.calls.append("sync_weights")
    if weights != "started":
        generation._llm_weights_sleeping = False  # what TRL's own push leaves
    if weights == "marked":
        mark_weights_asleep(generation)
    with pytest.raises(Rollout):
        generation.generate(prompts=[[1, 2]], images=None, num_generations=1)
    assert generation.llm.calls == calls


def test_name_or_path_is_where_trl_builds_the_reference_from(tiny_path, tmp_path):
    """The config's `_name_or_path` (`get_config_model_id`): TRL loads the reference from the checkpoint it names."""
    reference = AutoModelForCausalLM.from_pretrained(tiny_path)
    with torch.no_grad():
        next(reference.parameters()).add_(1.0)  # weights unlike the policy's
    reference.save_pretrained(tmp_path / "reference")
    policy = AutoModelForCausalLM.from_pretrained(tiny_path)
    point_reference_at(policy, str(tmp_path / "reference"))
    trainer = GRPOTrainer(model=policy, reward_funcs=[first], args=grpo_args(tmp_path / "out", beta=0.1),
                          train_dataset=Dataset.from_dict({"prompt": ["Zoey said"] * 2}),
                          processing_class=AutoTokenizer.from_pretrained(tiny_path, padding_side="left"))
    assert fingerprint(trainer.ref_model) == fingerprint(reference)
    assert fingerprint(trainer.ref_model) != fingerprint(trainer.model), "the control: not the policy's weights"
