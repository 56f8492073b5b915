"""What makes a stage adaptive: promotion by skill, replay of earlier levels, and a collapse guard.

Plain records parsed from a stage's config (or the curriculum-wide `curriculum.guard`), whose keys,
types, defaults and ranges are the schema's (conf/schema.py, whose ranges `curriculum.plan.build_plan` checks
first); the rules across keys are checked here, before any model loads, and every error names the key. The stage
loop (`train/`) acts on them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from conf.schema import GuardConfig, PromoteConfig, with_defaults
from core.checks import ConfigError

# The guard's signals: (config key, metrics.jsonl key it watches).
GUARD_SIGNALS = (
    ("length_drop", "completions/mean_length"),
    ("zero_std", "frac_reward_zero_std"),
    ("distinct_below", "completions/distinct_share"),
)


@dataclass(frozen=True)
class Promote:
    """End a stage once held-out accuracy on its own levels reaches `accuracy` (checked every `every` steps)."""

    accuracy: float  # threshold in [0, 1]
    every: int  # optimizer steps between checks
    min_steps: int  # no check before this many steps


@dataclass(frozen=True)
class Guard:
    """Collapse thresholds over a window of logged steps; None switches a signal off."""

    length_drop: float | None  # mean length fell by this share from the stage's best window
    zero_std: float | None  # share of zero-variance groups at or above this
    distinct_below: float | None  # share of distinct completions per group below this
    window: int  # logged steps averaged per signal
    action: str  # warn | stop


def parse_promote(value, key: str) -> Promote | None:
    """A stage's `promote` block (keys, types, defaults and ranges: conf/schema.py PromoteConfig); None when absent.

    >>> parse_promote({"accuracy": 0.8, "every": 10}, "promote")
    Promote(accuracy=0.8, every=10, min_steps=0)
    """
    if value is None:
        return None
    block = with_defaults(PromoteConfig, value)
    return Promote(float(block["accuracy"]), int(block["every"]), int(block["min_steps"]))


def parse_guard(value, key: str) -> Guard | None:
    """A `guard` block (keys, types, defaults and ranges: conf/schema.py GuardConfig); None when absent. Signals
    left out (or null) are not watched.

    >>> parse_guard({"length_drop": 0.5, "window": 5, "action": "stop"}, "guard")
    Guard(length_drop=0.5, zero_std=None, distinct_below=None, window=5, action='stop')
    """
    if value is None:
        return None
    block = with_defaults(GuardConfig, value)
    names = [name for name, _ in GUARD_SIGNALS]
    thresholds = {name: None if block[name] is None else float(block[name]) for name in names}
    if all(v is None for v in thresholds.values()):
        raise ConfigError(f"{key}: watches nothing; set at least one of {names}")
    return Guard(**thresholds, window=int(block["window"]), action=block["action"])


def replay_weights(share, earlier_levels: Sequence[str], key: str) -> dict[str, float]:
    """`replay: share` (in [0, 1): the schema's range) as pool weights spread evenly over the levels of earlier
    stages.

    >>> replay_weights(0.2, ["2steps", "3steps", "2steps"], "replay")
    {'2steps': 0.1, '3steps': 0.1}
    >>> replay_weights(0.0, [], "replay")
    {}
    """
    if share == 0.0:
        return {}
    levels = sorted(set(earlier_levels))
    if not levels:
        raise ConfigError(f"{key}: the first stage has no earlier stage to replay")
    return {level: share / len(levels) for level in levels}


def mixed_weights(own: Mapping[str, float], replay: Mapping[str, float]) -> dict[str, float]:
    """A stage's own level mix scaled down to make room for the replay shares (a level in both adds up), by key.

    >>> mixed_weights({"3ppl": 1.0}, {"2ppl": 0.2})
    {'2ppl': 0.2, '3ppl': 0.8}
    """
    scale = 1.0 - sum(replay.values())
    merged = {level: weight * scale for level, weight in own.items()}
    for level, weight in replay.items():
        merged[level] = merged.get(level, 0.0) + weight
    return {level: round(weight, 12) for level, weight in sorted(merged.items())}
