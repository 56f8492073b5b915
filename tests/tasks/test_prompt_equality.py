"""GRPO, SFT, validation and the length check see the same prompt, token for token, for every template.

Each side is tokenized by the code that really does it: TRL's GRPOTrainer (`_tokenize_prompts`),
TRL's SFTTrainer (its processed dataset, prompt = the tokens before the loss starts),
validation's batch encoder, and the length check's `prompt_ids`.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

from core.models import resolve_model
from curriculum.data import to_rows, to_sft_rows
from curriculum.prompts import prompt_ids, render_prompt
from curriculum.tasks.kk import KKTask, generate, kk_record
from eval.generation import encode_prompts
from tests.conftest import compose_cfg

TEMPLATES = ("think_answer", "answer_only", "logic_rl")


@pytest.fixture(scope="module")
def tiny(cache_dir):
    cfg = compose_cfg(cache_dir, "+curriculum=kk_ladder", "experiment=smoke")
    path = resolve_model(cfg.model, cache_dir)
    return path, AutoTokenizer.from_pretrained(path, padding_side="left"), AutoModelForCausalLM.from_pretrained(path)


def _grpo_ids(rows, path, tokenizer, model, tmp_path) -> list[int]:
    # activation_checkpointing named: left unset, TRL's default for the old name (gradient_checkpointing) warns
    args = GRPOConfig(output_dir=str(tmp_path / "grpo"), use_cpu=True, bf16=False, report_to="none",
                      num_generations=2, per_device_train_batch_size=2, max_completion_length=4,
                      activation_checkpointing=False)
    trainer = GRPOTrainer(model=model, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                          args=args, train_dataset=rows, processing_class=tokenizer)
    prompt_ids_by_trl, _, _ = trainer._tokenize_prompts([rows[0]["prompt"]])
    return list(prompt_ids_by_trl[0])


def _sft_prompt_ids(rows, tokenizer, model, tmp_path) -> list[int]:
    args = SFTConfig(output_dir=str(tmp_path / "sft"), use_cpu=True, bf16=False, report_to="none",
                     completion_only_loss=True, max_length=2048, activation_checkpointing=False)
    trainer = SFTTrainer(model=model, args=args, train_dataset=rows, processing_class=tokenizer)
    example = trainer.train_dataset[0]
    in_loss = [label != -100 for label in example["labels"]]  # completion-only loss: the prompt is masked
    return example["input_ids"][: in_loss.index(True)]


@pytest.mark.run
@pytest.mark.parametrize("template", TEMPLATES)
def test_every_consumer_sees_the_same_prompt_tokens(template, tiny, make_cfg, tmp_path):
    path, tokenizer, model = tiny
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke", f"prompt={template}")
    task, records = KKTask(fmt=template), [kk_record(r) for r in generate(3, 2, seed=7)]
    grpo_rows = to_rows(task, records, cfg.prompt, tokenizer, chat=True)
    grpo = _grpo_ids(grpo_rows, path, tokenizer, model, tmp_path)
    sft = _sft_prompt_ids(to_sft_rows(task, records, cfg.prompt, tokenizer, chat=True), tokenizer, model, tmp_path)
    encoded = encode_prompts([grpo_rows[0]["prompt"]], tokenizer)
    validation = encoded["input_ids"][0][encoded["attention_mask"][0].bool()].tolist()
    length_check = prompt_ids(grpo_rows[0]["prompt"], tokenizer)
    assert grpo == sft == validation == length_check
    text = tokenizer.decode(grpo)
    assert text.count("<|im_start|>assistant") == 1, "one assistant turn, continued by the model"
    if template == "logic_rl":
        assert text.endswith("<|im_start|>assistant\n<think>"), "the pre-filled <think> is continued, not closed"


def test_trl_given_chat_messages_would_close_the_prefilled_turn(tiny, make_cfg, tmp_path):
    """Why prompts are rendered to text: TRL's own chat rendering ends the <think> turn and opens another."""
    path, tokenizer, model = tiny
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke", "prompt=logic_rl")
    record = generate(3, 1, seed=7)[0]
    messages = render_prompt(record["quiz"], cfg.prompt, chat=True)
    ours = prompt_ids(to_rows(KKTask(), [kk_record(record)], cfg.prompt, tokenizer, chat=True)[0]["prompt"], tokenizer)
    with torch.no_grad():
        trl_chat = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                 return_dict=True)["input_ids"]
    assert list(trl_chat) != ours
    assert tokenizer.decode(trl_chat).count("<|im_start|>assistant") == 2
