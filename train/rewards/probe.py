"""Probe rewards: dense, learnable from any starting model, for checking that a pipeline learns.

A K&K reward gives a random-init model the same score in every group (it never writes an answer),
so every advantage is 0 and a broken reward -> advantage path would go unnoticed. A probe reward
varies within every group from the first step, so GRPO has a signal and the reward must rise if
the policy gradient is wired right. `experiment=smoke` adds one; the learning test relies on it.
"""

from __future__ import annotations

from collections.abc import Sequence


def low_token_share(completions, completion_ids: Sequence[Sequence[int]], below: int, **kwargs) -> list[float]:
    """The share of each completion's tokens whose id is below `below` (0.0 for an empty completion).

    A random-init model samples ids about uniformly, so it starts near `below / vocabulary size`
    with spread inside every group; raising the share is learnable from the reward alone.

    >>> low_token_share(["a", "b", ""], [[1, 700, 2, 900], [4], []], below=600)
    [0.5, 1.0, 0.0]
    """
    return [sum(t < below for t in toks) / len(toks) if toks else 0.0 for toks in completion_ids]
