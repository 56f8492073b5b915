"""K&K's reward components in TRL's form, `f(completions, names, solution, **kwargs) -> list[float]` (logged as
`rewards/<__name__>/mean`), all but `logic_rl_strict` on the one grader (`grading.grader.grade`).
`reward_components` binds them to a run (`KKTask.reward_functions`); presets: conf/reward/*.yaml.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from core.checks import ConfigError, is_number
from curriculum.tasks.base import RewardFunc, RewardSettings, completion_text
from curriculum.tasks.kk.grading.grader import Grade, grade
from curriculum.tasks.kk.grading.logic_rl import logic_rl_scores

COMPONENTS = ("format", "think", "answer", "partial", "overlong", "tiered", "logic_rl_strict")
TIERS = ("no_format", "half_format", "unparsed", "wrong", "correct")
TIERED_SCHEMES: dict[str, dict[str, float]] = {
    # the seeds' v1, v2 and v4-instruct (no half tier) schemes
    "seed_v1": {"no_format": -5.0, "half_format": 1.0, "unparsed": 3.0, "wrong": 3.0, "correct": 5.0},
    "seed_v2": {"no_format": -1.0, "half_format": -0.3, "unparsed": 0.3, "wrong": 0.3, "correct": 5.0},
    "seed_v4_instruct": {"no_format": -1.0, "half_format": -1.0, "unparsed": -0.1, "wrong": -0.1, "correct": 5.0},
    # Logic-RL: format +1/-1 plus answer +2 / -1.5 wrong / -2 unparseable (and -2 on a format failure)
    "logic_rl": {"no_format": -3.0, "half_format": -3.0, "unparsed": -1.0, "wrong": -0.5, "correct": 3.0},
}
PARTIAL_FLOOR, PARTIAL_SPAN = 0.3, 0.7

@functools.lru_cache(maxsize=4096)
def _graded(text: str, names: tuple[str, ...], solution: tuple[bool, ...], fmt: str) -> Grade:
    """`grade`, memoised (least recently used out) so every component of a batch grades a completion once.

    >>> text = "<answer>Zoey is a knight</answer>"
    >>> _graded(text, ("Zoey",), (True,), "answer_only") is _graded(text, ("Zoey",), (True,), "answer_only")
    True
    """
    return grade(text, names, solution, fmt=fmt)


def _grades(completions, names, solution, fmt: str) -> list[Grade]:
    return [_graded(completion_text(completion), tuple(people), tuple(bool(role) for role in roles), fmt)
            for completion, people, roles in zip(completions, names, solution, strict=True)]


def format_reward(completions, names, solution, *, fmt="think_answer", **kwargs) -> list[float]:
    """1.0 for the strict format, else 0.0.

    >>> format_reward(["<think>a</think><answer>Zoey is a knight</answer>", "Zoey is a knight"],
    ...               [["Zoey"]] * 2, [[True]] * 2)
    [1.0, 0.0]
    """
    return [float(g.format_ok) for g in _grades(completions, names, solution, fmt)]


def think_reward(completions, names, solution, *, fmt="think_answer", **kwargs) -> list[float]:
    """1.0 when a non-empty <think> block is present, else 0.0.

    >>> think_reward(["<think>Zoey lies.</think>", "<think> </think>"], [["Zoey"]] * 2, [[False]] * 2)
    [1.0, 0.0]
    """
    return [float(g.think_ok) for g in _grades(completions, names, solution, fmt)]


def answer_reward(completions, names, solution, *, fmt="think_answer", **kwargs) -> list[float]:
    """1.0 when the answer is correct (format not required), else 0.0.

    >>> chat = [{"role": "assistant", "content": "<answer>Zoey: knave</answer>"}]
    >>> answer_reward([chat, "<answer>Zoey: knight</answer>"], [["Zoey"]] * 2, [[False]] * 2)
    [1.0, 0.0]
    """
    return [float(g.correct) for g in _grades(completions, names, solution, fmt)]


def partial_reward(completions, names, solution, *, fmt="think_answer", **kwargs) -> list[float]:
    """1.0 if correct; 0.3 + 0.7 * share right when everyone has exactly one role; 0.0 when anyone is missing,
    hedged or contradictory, or there is no answer (reasoning-gym's: a blind guess earns at least 0.3).

    >>> people, truth = [["A", "B", "C", "D"]] * 3, [[True, True, False, False]] * 3
    >>> partial_reward(["<answer>A and B are knights, C and D are knaves</answer>",
    ...                 "<answer>All four are knights</answer>", "<answer>A is a knight</answer>"],
    ...                people, truth, fmt="answer_only")  # all four knights: 2 of 4 right
    [1.0, 0.65, 0.0]
    """
    out = []
    for g in _grades(completions, names, solution, fmt):
        if g.correct or not g.complete:
            out.append(float(g.correct))
            continue
        # rounded: 0.3 + 0.7 * 0.5 is 0.6499999...; six digits keep the documented values exact
        out.append(round(PARTIAL_FLOOR + PARTIAL_SPAN * g.n_right / len(g.assignment), 6))
    return out


def overlong_reward(completions, names, solution, *, max_completion_length: int, buffer: int = 128,
                    completion_ids=None, **kwargs) -> list[float]:
    """DAPO's soft overlong punishment of L = len(completion_ids) at limit M and buffer B: 0 when L <= M - B,
    -(L - (M - B)) / B in between, -1 when L >= M.

    >>> overlong_reward(["a"] * 4, [["A"]] * 4, [[True]] * 4, max_completion_length=10, buffer=4,
    ...                 completion_ids=[[0] * 6, [0] * 7, [0] * 9, [0] * 10])
    [0.0, -0.25, -0.75, -1.0]
    """
    if completion_ids is None:
        raise ValueError("overlong_reward needs completion_ids (GRPOTrainer passes them)")
    start = max_completion_length - buffer
    return [-1.0 if len(ids) >= max_completion_length else -max(0, len(ids) - start) / buffer
            for ids in completion_ids]


def tier(g: Grade) -> str:
    """The tier of one grade: no_format / half_format (not format_ok: `Grade.partial_format`), else correct,
    wrong (one role each, some wrong) or unparsed (someone missing, hedged or contradictory, or no answer).

    >>> tier(grade("<think>x</think><answer>Zoey is a knave</answer>", ["Zoey"], [True]))
    'wrong'
    """
    if not g.format_ok:
        return "half_format" if g.partial_format else "no_format"
    if g.correct:
        return "correct"
    return "wrong" if g.complete else "unparsed"


def tiered_reward(completions, names, solution, *, fmt="think_answer",
                  table: Mapping[str, float] | None = None, **kwargs) -> list[float]:
    """The table's value for each completion's tier (default table: Logic-RL's).

    >>> tiered_reward(["reasoning</think><answer>(1) Zoey is a knight</answer>",
    ...                "reasoning</think><answer>(1) Zoey is a knave</answer>",
    ...                "reasoning</think><answer>I cannot determine it</answer>", "Zoey is a knight"],
    ...               [["Zoey"]] * 4, [[True]] * 4, fmt="logic_rl")
    [3.0, -0.5, -1.0, -3.0]
    """
    table = TIERED_SCHEMES["logic_rl"] if table is None else table
    return [float(table[tier(g)]) for g in _grades(completions, names, solution, fmt)]


def logic_rl_strict_reward(completions, names, solution, *, prompts, **kwargs) -> list[float]:
    """Logic-RL's score of each prompt + completion, by its own parser, not the grader.

    >>> prompt = "<|im_start|>assistant\\n<think>"
    >>> logic_rl_strict_reward(["Hmm.</think><answer>Knights: Zoey, Ava</answer>"], [["Zoey", "Ava"]],
    ...                        [[True, True]], prompts=[prompt])  # +3 with the grader: a -2 answer here
    [-1.0]
    """
    if not all(isinstance(p, str) for p in prompts):
        raise ValueError("logic_rl_strict_reward scores the prompt's text with the completion; the rows' prompts "
                         "are rendered text (curriculum.prompts), so a chat-message prompt is a wiring error")
    return logic_rl_scores(prompts, [completion_text(c) for c in completions], names, solution)


_FUNCS: dict[str, RewardFunc] = {
    "format": format_reward, "think": think_reward, "answer": answer_reward, "partial": partial_reward,
    "overlong": overlong_reward, "tiered": tiered_reward, "logic_rl_strict": logic_rl_strict_reward}


def tier_table(tiered: Mapping, key: str = "reward.tiered") -> dict[str, float]:
    """The tier table of a `tiered` config: the named scheme's, overridden by `table` entries. `scheme: custom`
    starts from nothing and needs no_format, wrong and correct (half_format defaults to no_format, unparsed to wrong).

    >>> tier_table({"scheme": "custom", "table": {"no_format": -1, "wrong": 0, "correct": 1}})
    {'no_format': -1.0, 'half_format': -1.0, 'unparsed': 0.0, 'wrong': 0.0, 'correct': 1.0}
    """
    scheme = tiered.get("scheme", "logic_rl")
    if scheme != "custom" and scheme not in TIERED_SCHEMES:
        raise ConfigError(f"{key}.scheme: {scheme!r} unknown; known: custom, {', '.join(TIERED_SCHEMES)}")
    table = tiered.get("table") or {}
    for name, value in table.items():
        if name not in TIERS:
            raise ConfigError(f"{key}.table.{name}: unknown tier; known: {', '.join(TIERS)}")
        if not is_number(value, finite=True):
            raise ConfigError(f"{key}.table.{name}: {value!r} is not a finite number")
    values = {**TIERED_SCHEMES.get(scheme, {}), **{name: float(value) for name, value in table.items()}}
    for required in ("no_format", "wrong", "correct"):
        if required not in values:
            raise ConfigError(f"{key}.table.{required}: required with scheme 'custom'")
    values.setdefault("half_format", values["no_format"])
    values.setdefault("unparsed", values["wrong"])
    return {name: values[name] for name in TIERS}


def reward_components(settings: RewardSettings) -> dict[str, RewardFunc]:
    """Every component bound to the run: its format, completion length, `overlong.buffer` and `tiered` table.

    >>> funcs = reward_components(RewardSettings("think_answer", 1024, {"overlong": {"buffer": 128}}))
    >>> list(funcs) == list(COMPONENTS), funcs["answer"].func.__name__
    (True, 'answer_reward')
    """
    buffer = int((settings.options.get("overlong") or {}).get("buffer", 128))  # > 0: the schema's range
    table = tier_table(settings.options.get("tiered") or {})
    graded = {"fmt": settings.fmt}
    bound: dict[str, dict[str, Any]] = {
        # a buffer longer than the completion (a CPU smoke run) ramps over the whole length
        "overlong": {"max_completion_length": settings.max_completion_length,
                     "buffer": min(buffer, settings.max_completion_length)},
        "tiered": {**graded, "table": table},
        "logic_rl_strict": {},  # Logic-RL's own parser, not the grader
    }
    return {name: functools.partial(_FUNCS[name], **bound.get(name, graded)) for name in COMPONENTS}
