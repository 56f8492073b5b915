"""Measuring pieces of `python -m tests.bench` for tasks beyond K&K (curriculum/tasks)."""

from __future__ import annotations

import random
import time

from curriculum.tasks.gsm8k import LEVELS, GSM8KTask
from curriculum.tasks.gsm8k.grader import grade
from curriculum.tasks.gsm8k.rewards import REWARD_FUNCTIONS

#: How a completion ends: the recipe's format with the right, a wrong or a hedged number, chatter
#: after it, no format at all. Real completions mix these; each path of the grader is timed.
ENDINGS = ("right", "wrong", "hedged", "chatter", "unformatted")


def gsm8k_completion(rng: random.Random, solution: str, answer: str) -> str:
    """A recipe-format completion of ~800 characters (the recipe's 200 tokens): the reference steps,
    repeated as a model rambles, then an answer block ended one of the ENDINGS ways."""
    steps = solution.rpartition("####")[0].strip()
    reasoning = steps
    while len(reasoning) < 700:
        reasoning += "\nLet me check: " + steps
    ending = rng.choice(ENDINGS)
    number = {"right": f"${answer}.", "wrong": f"{answer}1", "hedged": f"about {answer}"}.get(ending, answer)
    text = f"<reasoning>\n{reasoning[:700]}\n</reasoning>\n<answer>\n{number}\n</answer>\n"
    if ending == "chatter":
        return text + "I hope this helps!"
    return text.replace("<reasoning>\n", "").replace("</reasoning>", "") if ending == "unformatted" else text


def gsm8k_cases(n: int, seed: int) -> list[tuple[str, str]]:
    """`n` (completion, reference answer) pairs made from the shipped sample's training problems."""
    task, rng = GSM8KTask(source="sample"), random.Random(seed)
    records = [r for level in LEVELS for r in task.records(level, "train")]
    picked = [rng.choice(records) for _ in range(n)]
    return [(gsm8k_completion(rng, r.source["answer"], r.columns["answer"]), r.columns["answer"]) for r in picked]


def gsm8k_grader_throughput(n: int = 2000, *, seed: int = 0) -> dict[str, float]:
    """Completions per second of the GSM8K grader alone and of the five-reward stack (all five per completion).

    >>> rates = gsm8k_grader_throughput(20)
    >>> rates["grader"] > 0 and rates["stack"] > 0
    True
    """
    cases = gsm8k_cases(n, seed)
    began = time.perf_counter()
    for completion, answer in cases:
        grade(completion, answer)
    grader_s = time.perf_counter() - began
    completions, answers = [c for c, _ in cases], [a for _, a in cases]
    began = time.perf_counter()
    for reward in REWARD_FUNCTIONS.values():
        reward(completions, answer=answers)
    stack_s = time.perf_counter() - began
    return {"grader": n / grader_s, "stack": n / stack_s}
