"""core.models: model sources (tiny, smollm2, hub), the build cache, device flags, LoRA handoff."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import huggingface_hub
import pytest
import torch
from omegaconf import OmegaConf
from peft import get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig
from trl.models.utils import disable_gradient_checkpointing

from core.model_cache import COMPLETION_MARKER, entry_name, temp_dir_prefix
from core.models import (
    ModelUnavailableError,
    device_settings,
    load_for_inference,
    merged_lora,
    quiet_libraries,
    resolve_model,
    tiny_spec,
)
from train.stages.fields import lora_config

MODEL_CONF = Path(__file__).resolve().parents[2] / "conf" / "model"
SCHEMA_KEYS = {"name", "source", "id", "chat", "context_length", "chat_template_kwargs", "lora"}
TAGS = ("<think>", "</think>", "<answer>", "</answer>")
KK_TEXT = (
    "A very special island is inhabited only by knights and knaves. Zoey remarked, \"Oliver is not a "
    "knight\". Oliver stated, \"Oliver is a knight if and only if Zoey is a knave\"."
)
LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": "all-linear"}


def model_cfg(name: str, **overrides):
    """conf/model/<name>.yaml as Hydra would place it under `cfg.model` (a `defaults` list of other
    model files merged first, `_self_` last, as model/tiny_vllm builds on model/tiny), with overrides merged in."""
    own = OmegaConf.load(MODEL_CONF / f"{name}.yaml")
    bases = [model_cfg(entry) for entry in own.pop("defaults", []) if entry != "_self_"]
    return OmegaConf.merge(*bases, own, overrides)


def small_tiny_cfg(seed: int = 0):
    """The tiny config with a smaller tokenizer corpus: for tests that build several entries."""
    return model_cfg("tiny", tiny={"corpus_size": 100, "seed": seed})


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(scope="session")
def tiny_dir(tiny_cache) -> str:
    return resolve_model(model_cfg("tiny"), tiny_cache)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_dir):
    return AutoTokenizer.from_pretrained(tiny_dir)


@pytest.mark.parametrize("path", sorted(MODEL_CONF.glob("*.yaml")), ids=lambda p: p.stem)
def test_model_yaml_follows_the_schema(path):
    cfg = model_cfg(path.stem)
    assert set(cfg) >= SCHEMA_KEYS, SCHEMA_KEYS - set(cfg)
    assert cfg.name == path.stem
    assert cfg.source in ("hub", "tiny", "smollm2")
    assert (cfg.id is not None) == (cfg.source == "hub")
    assert cfg.chat == (path.stem != "qwen3-0.6b-base")
    assert lora_config(cfg) is None


def test_tiny_is_built_once_then_reused(tiny_cache, tiny_dir):
    marker = Path(tiny_dir) / COMPLETION_MARKER
    built_at = marker.stat().st_mtime_ns
    assert resolve_model(model_cfg("tiny"), tiny_cache) == tiny_dir
    assert marker.stat().st_mtime_ns == built_at
    assert json.loads(marker.read_text())["spec"] == tiny_spec(model_cfg("tiny").tiny)
    assert sorted(p.name for p in tiny_cache.iterdir()) == [Path(tiny_dir).name]  # no temp dir left


def test_tiny_build_is_deterministic_for_its_seed(tmp_path):
    first = Path(resolve_model(small_tiny_cfg(seed=1), tmp_path / "a"))
    again = Path(resolve_model(small_tiny_cfg(seed=1), tmp_path / "b"))
    other = Path(resolve_model(small_tiny_cfg(seed=2), tmp_path / "a"))
    assert first.name == again.name != other.name
    for name in ("tokenizer.json", "model.safetensors"):
        assert (first / name).read_bytes() == (again / name).read_bytes()
    assert (first / "model.safetensors").read_bytes() != (other / "model.safetensors").read_bytes()


def test_tiny_tokenizer_round_trips_kk_text_and_tags(tiny_tokenizer):
    text = f"<think>\n{KK_TEXT}\n</think>\n<answer>\n(1) Zoey is a knave\n(2) Oliver is a knight\n</answer>"
    ids = tiny_tokenizer.encode(text)
    assert tiny_tokenizer.decode(ids) == text
    assert tiny_tokenizer.decode(ids, skip_special_tokens=True) == text  # tags are not special
    for tag in TAGS:
        assert len(tiny_tokenizer.encode(tag)) == 1, tag
    unseen = "Xavier says ü 🙂"  # byte-level: text outside the training corpus still round-trips
    assert tiny_tokenizer.decode(tiny_tokenizer.encode(unseen)) == unseen
    assert len(ids) < len(text) / 3  # trained on this kind of text, so it compresses it


def test_tiny_special_tokens(tiny_dir, tiny_tokenizer):
    assert tiny_tokenizer.eos_token == "<|im_end|>"
    assert tiny_tokenizer.pad_token == "<|endoftext|>"
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    eos = model.generation_config.eos_token_id
    assert tiny_tokenizer.convert_tokens_to_ids("<|im_end|>") in (eos if isinstance(eos, list) else [eos])
    assert model.config.pad_token_id == tiny_tokenizer.pad_token_id


def test_tiny_chat_template(tiny_tokenizer):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": KK_TEXT}]
    opened = tiny_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert opened == (
        f"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n{KK_TEXT}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    prefilled = messages + [{"role": "assistant", "content": "<think>"}]
    continued = tiny_tokenizer.apply_chat_template(prefilled, tokenize=False, continue_final_message=True)
    assert continued == opened + "<think>"
    closed = tiny_tokenizer.apply_chat_template(prefilled, tokenize=False)
    assert closed == opened + "<think><|im_end|>\n"


def test_tiny_generates_from_a_left_padded_batch(tiny_dir):
    model, tokenizer = load_for_inference(tiny_dir, "cpu")
    assert tokenizer.padding_side == "left" and tokenizer.pad_token is not None
    prompts = [[{"role": "user", "content": text}] for text in ("Who is a knight?", KK_TEXT)]
    batch = tokenizer.apply_chat_template(
        prompts, add_generation_prompt=True, padding=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=4, do_sample=False)
    assert out.shape[0] == 2 and 0 < out.shape[1] - batch["input_ids"].shape[1] <= 4


def test_trls_checkpointing_toggle_around_generation_warns_nothing_once_libraries_are_quiet(tiny_dir):
    # TRL 1.16 turns activation checkpointing off for each generation and on again through transformers' deprecated
    # names: a FutureWarning each time, at every stage start on a real model, until the entry point quiets them
    model, _ = load_for_inference(tiny_dir, "cpu")
    model.activation_checkpointing_enable()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with disable_gradient_checkpointing(model):
            assert not model.is_activation_checkpointing
        loud = [str(w.message) for w in caught]
        caught.clear()
        quiet_libraries()
        with disable_gradient_checkpointing(model):
            pass
    assert any("gradient_checkpointing_enable` is deprecated" in m for m in loud), loud  # the noise is real
    assert model.is_activation_checkpointing and not [str(w.message) for w in caught if "deprecated" in str(w.message)]


def test_unfinished_builds_are_never_reused(tmp_path):
    cfg = small_tiny_cfg()
    entry = tmp_path / entry_name("tiny", tiny_spec(cfg.tiny))
    entry.mkdir()
    (entry / "config.json").write_text("{}")  # a half-written checkpoint without the completion marker
    exited = subprocess.Popen([sys.executable, "-c", ""])
    exited.wait()
    orphan = tmp_path / f"{temp_dir_prefix(entry.name)}{exited.pid}-deadbeef"  # a killed build's temp dir
    running = tmp_path / f"{temp_dir_prefix(entry.name)}{os.getpid()}-cafecafe"  # a build in progress
    for leftover in (orphan, running):
        leftover.mkdir()
        (leftover / "config.json").write_text("{}")

    assert resolve_model(cfg, tmp_path) == str(entry)
    assert (entry / COMPLETION_MARKER).is_file()
    assert AutoModelForCausalLM.from_pretrained(entry).config.model_type == "qwen2"
    assert not orphan.exists()
    assert running.exists()


def test_hub_source_offline_names_the_offline_models(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))  # nothing cached
    for name in ("qwen2.5-0.5b-instruct", "qwen3-0.6b", "qwen3-0.6b-base"):
        with pytest.raises(ModelUnavailableError) as raised:
            resolve_model(model_cfg(name), tmp_path)
        message = str(raised.value)
        assert "model=smollm2-135m" in message and "model=tiny" in message
        assert isinstance(raised.value, RuntimeError)


def test_hub_source_accepts_a_local_checkpoint_dir(tiny_dir, tmp_path):
    assert resolve_model(model_cfg("qwen2.5-0.5b-instruct", id=tiny_dir), tmp_path) == tiny_dir


def test_device_settings_on_cpu_are_accepted_by_grpo_config(tmp_path):
    settings = device_settings()
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine; the CPU branch is what this test checks")
    assert settings["dtype"] == torch.float32 and settings["use_cpu"] and not settings["bf16"]
    # activation_checkpointing named: left unset, TRL's default for the old name (gradient_checkpointing) warns
    args = GRPOConfig(output_dir=str(tmp_path), bf16=settings["bf16"], use_cpu=settings["use_cpu"],
                      optim=settings["optim"], report_to="none", activation_checkpointing=True)
    assert args.optim == "adamw_torch"


def test_device_settings_with_a_bf16_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))  # an A100
    settings = device_settings({})
    assert settings["device"] == "cuda" and settings["bf16"] and not settings["use_cpu"]
    assert settings["dtype"] == torch.float32  # master weights; bf16 is the autocast compute dtype
    assert settings["inference_dtype"] == torch.bfloat16
    assert settings["optim"] in ("adamw_8bit", "adamw_torch")


def test_lora_config_from_the_model_block():
    config = lora_config(model_cfg("tiny", lora=LORA))
    assert (config.r, config.lora_alpha, config.lora_dropout) == (4, 8, 0.0)
    assert config.target_modules == "all-linear"
    assert lora_config(model_cfg("tiny", lora={"r": 4})).lora_alpha == 32, "a key left out: the schema's default"


def _merged_and_saved(model, tokenizer, out_dir: Path) -> Path:
    merged_lora(model).save_pretrained(out_dir)  # as a stage publishes its final (train/stages/training.py)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def test_lora_merge_saves_full_weights_that_moved(tiny_dir, tiny_tokenizer, tmp_path):
    base = AutoModelForCausalLM.from_pretrained(tiny_dir)
    before = {name: tensor.clone() for name, tensor in base.state_dict().items()}
    model = get_peft_model(base, lora_config(model_cfg("tiny", lora=LORA)))
    batch = tiny_tokenizer(["Zoey is a knight.", "Oliver is a knave."], return_tensors="pt", padding=True)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model(**batch, labels=batch["input_ids"]).loss.backward()
    optimizer.step()

    out_dir = _merged_and_saved(model, tiny_tokenizer, tmp_path / "final")
    merged = AutoModelForCausalLM.from_pretrained(out_dir)
    after = merged.state_dict()
    assert not any("lora" in name for name in after)
    assert set(after) == set(before)
    assert any(not torch.equal(after[name], before[name]) for name in before)
    assert AutoTokenizer.from_pretrained(out_dir).eos_token == "<|im_end|>"


def test_merged_lora_passes_a_plain_model_through(tiny_dir, tiny_tokenizer, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    out_dir = _merged_and_saved(model, tiny_tokenizer, tmp_path / "final")
    reloaded = AutoModelForCausalLM.from_pretrained(out_dir)
    assert all(torch.equal(reloaded.state_dict()[k], v) for k, v in model.state_dict().items())


@pytest.mark.slow
def test_smollm2_converts_offline_and_answers(tmp_path):
    path = resolve_model(model_cfg("smollm2-135m"), tmp_path)
    record = json.loads((Path(path) / COMPLETION_MARKER).read_text())
    assert "Paris" in record["smoke_reply"]
    model, tokenizer = load_for_inference(path, "cpu")
    assert model.dtype == torch.float32 and model.config.model_type == "llama"
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|endoftext|>")
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)
    out = model.generate(**inputs, max_new_tokens=16, do_sample=False)
    assert "Paris" in tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    assert resolve_model(model_cfg("smollm2-135m"), tmp_path) == path  # cached
    assert not list(Path(path).rglob("*.gguf"))
