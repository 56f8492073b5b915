"""K&K's reference responses for a supervised cold start (`KKTask.sft_target`): the published chain of
thought, then the answer.

The target is what the prompt format asks for (think_answer: <think>cot</think> then <answer>;
answer_only: just <answer>; logic_rl: the prompt pre-fills <think>, so the target starts inside it).
Every target must grade correct with the project's grader: SFT and the RL reward agree on what a
right answer is (tests/runs/test_sft.py checks it on the published records).
"""

from __future__ import annotations

from collections.abc import Mapping


def chain_of_thought(record: Mapping) -> str:
    """The published backtracking reasoning as one paragraph."""
    return " ".join([record["cot_head"], *record["cot_repeat_steps"], record["cot_foot"]])


def reference_response(record: Mapping, fmt: str) -> str:
    """The completion an SFT stage trains on for `record` in prompt format `fmt`.

    >>> rec = {"cot_head": "Think.", "cot_repeat_steps": ["Step."], "cot_foot": "Done.",
    ...        "solution_text_format": "(1) Zoey is a knave"}
    >>> reference_response(rec, "think_answer")
    '<think>Think. Step. Done.</think>\\n<answer>\\n(1) Zoey is a knave\\n</answer>'
    """
    answer = f"<answer>\n{record['solution_text_format']}\n</answer>"
    if fmt == "answer_only":
        return answer
    if fmt == "think_answer":
        return f"<think>{chain_of_thought(record)}</think>\n{answer}"
    if fmt == "logic_rl":  # the prompt already ends with "<think>"
        return f"{chain_of_thought(record)}</think>\n{answer}"
    raise ValueError(f"prompt.fmt: no reference response for format {fmt!r}")
