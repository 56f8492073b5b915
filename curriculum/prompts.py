"""Prompt templates (conf/prompt/*.yaml), rendered once to the exact text every consumer tokenizes.

GRPO, SFT, validation and the length check must see the same prompt, token for token. TRL 1.16 never continues
a final assistant message, so a pre-filled `<think>` (prompt=logic_rl) would become a closed turn: the prompt is
rendered here to text, the prefill continued, and TRL tokenizes that text as `prompt_ids` does.
"""

from __future__ import annotations

from collections.abc import Mapping


def render_prompt(quiz: str, prompt_cfg: Mapping, *, chat: bool) -> list[dict[str, str]] | str:
    """The prompt as chat messages (an assistant prefill is the last message) or as plain text.

    >>> cfg = {"system": "S", "user": "Q: {quiz}", "prefill": "<think>", "plain": "{system}|{user}|{prefill}"}
    >>> render_prompt("who?", cfg, chat=False)
    'S|Q: who?|<think>'
    >>> [m["role"] for m in render_prompt("who?", cfg, chat=True)]
    ['system', 'user', 'assistant']
    """
    # str.replace, not str.format: a quiz may one day carry braces, and templates never need more.
    user = prompt_cfg["user"].replace("{quiz}", quiz)
    system, prefill = prompt_cfg["system"], prompt_cfg.get("prefill") or ""
    if not chat:
        return prompt_cfg["plain"].replace("{system}", system).replace("{user}", user).replace("{prefill}", prefill)
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    if prefill:
        messages.append({"role": "assistant", "content": prefill})
    return messages


def prompt_text(prompt, tokenizer, chat_kwargs: Mapping | None = None) -> str:
    """The text a model is fed for `prompt`: chat template applied, an assistant prefill continued.

    A tokenizer that adds BOS itself would get it twice from a template that also writes it, so a
    leading BOS is left to the tokenizer (`prompt_ids` then holds exactly one).
    """
    if isinstance(prompt, str):
        return prompt
    continue_final = prompt[-1]["role"] == "assistant"
    text = tokenizer.apply_chat_template(
        prompt, tokenize=False, add_generation_prompt=not continue_final,
        continue_final_message=continue_final, **dict(chat_kwargs or {}),
    )
    bos = tokenizer.bos_token
    if bos and text.startswith(bos) and _adds_bos(tokenizer):
        text = text[len(bos):]
    return text


def _adds_bos(tokenizer) -> bool:
    ids = tokenizer("x")["input_ids"]
    return bool(ids) and ids[0] == tokenizer.bos_token_id


def prompt_ids(text: str, tokenizer) -> list[int]:
    """The token ids of a rendered prompt, tokenized as TRL's GRPO and SFT trainers do (`tokenizer(text)`)."""
    return tokenizer(text)["input_ids"]
