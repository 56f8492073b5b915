"""Prompt templates (conf/prompt/*.yaml), rendered once to the exact text GRPO, SFT, validation and the length
check all tokenize. TRL 1.16 never continues a final assistant message, so a pre-filled `<think>` would become a
closed turn: the prompt is rendered here to text, the prefill continued, and TRL tokenizes that text."""

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
    """The text a model is fed for `prompt`: chat template applied, an assistant prefill continued, a leading BOS
    left to a tokenizer that adds it itself (else `prompt_ids` would hold two)."""
    if isinstance(prompt, str):
        return prompt
    continue_final = prompt[-1]["role"] == "assistant"
    text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=not continue_final,
                                         continue_final_message=continue_final, **dict(chat_kwargs or {}))
    bos = tokenizer.bos_token
    if bos and text.startswith(bos) and tokenizer("x")["input_ids"][:1] == [tokenizer.bos_token_id]:
        text = text[len(bos):]
    return text


def prompt_ids(text: str, tokenizer) -> list[int]:
    """The token ids of a rendered prompt, tokenized as TRL's GRPO and SFT trainers do (`tokenizer(text)`)."""
    return tokenizer(text)["input_ids"]
