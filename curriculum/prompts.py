"""Prompt templates (conf/prompt/*.yaml) rendered for chat models or as plain text for base models."""

from __future__ import annotations

from collections.abc import Mapping


def render_prompt(quiz: str, prompt_cfg: Mapping, *, chat: bool) -> list[dict[str, str]] | str:
    """The prompt TRL sees: chat messages (an assistant prefill is continued) or plain text.

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
        # TRL continues a final assistant message (continue_final_message) instead of opening a new turn.
        messages.append({"role": "assistant", "content": prefill})
    return messages
