"""What makes a stage adaptive: promotion by skill, replay of earlier levels, and a collapse guard.

Plain records parsed from a stage's config (or the curriculum-wide `curriculum.guard`), whose keys,
types and defaults are the schema's (conf/schema.py); the ranges are checked here, before any model
loads, and every error names the key. The stage loop (`train/`) acts on them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from omegaconf import OmegaConf

from conf.schema import GuardConfig, PromoteConfig
from core.checks import ConfigError, is_number, plain, whole_number

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


def _share(value, key: str, *, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if not is_number(value) or not 0.0 <= value <= 1.0:
        raise ConfigError(f"{key}: must be a number in [0, 1] (got {value!r})")
    return float(value)


def _with_defaults(block, record: type) -> dict:
    """A block as plain data merged onto its record of the schema: each key it leaves out at its default."""
    return plain(OmegaConf.merge(OmegaConf.structured(record), plain(block)))


def parse_promote(value, key: str) -> Promote | None:
    """A stage's `promote` block (keys, types and defaults: conf/schema.py PromoteConfig); None when absent.

    >>> parse_promote({"accuracy": 0.8, "every": 10}, "promote")
    Promote(accuracy=0.8, every=10, min_steps=0)
    >>> parse_promote({"accuracy": 2}, "s.promote")
    Traceback (most recent call last):
    ...
    core.checks.ConfigError: s.promote.accuracy: must be a number in [0, 1] (got 2.0)
    """
    if value is None:
        return None
    block = _with_defaults(value, PromoteConfig)
    return Promote(_share(block["accuracy"], f"{key}.accuracy"),
                   whole_number(block["every"], f"{key}.every", least=1),
                   whole_number(block["min_steps"], f"{key}.min_steps", least=0))


def parse_guard(value, key: str) -> Guard | None:
    """A `guard` block (keys, types and defaults: conf/schema.py GuardConfig); None when absent. Signals left
    out (or null) are not watched.

    >>> parse_guard({"length_drop": 0.5, "window": 5, "action": "stop"}, "guard")
    Guard(length_drop=0.5, zero_std=None, distinct_below=None, window=5, action='stop')
    """
    if value is None:
        return None
    block = _with_defaults(value, GuardConfig)
    names = [name for name, _ in GUARD_SIGNALS]
    thresholds = {name: _share(block[name], f"{key}.{name}", allow_none=True) for name in names}
    if all(v is None for v in thresholds.values()):
        raise ConfigError(f"{key}: watches nothing; set at least one of {names}")
    return Guard(**thresholds, window=whole_number(block["window"], f"{key}.window", least=1), action=block["action"])


def replay_weights(share, earlier_levels: Sequence[str], key: str) -> dict[str, float]:
    """`replay: share` as pool weights spread evenly over the levels of earlier stages.

    >>> replay_weights(0.2, ["2steps", "3steps", "2steps"], "replay")
    {'2steps': 0.1, '3steps': 0.1}
    >>> replay_weights(0.0, [], "replay")
    {}
    """
    share = _share(share, key)
    if share == 0.0:
        return {}
    levels = sorted(set(earlier_levels))
    if not levels:
        raise ConfigError(f"{key}: the first stage has no earlier stage to replay")
    if share >= 1.0:
        raise ConfigError(f"{key}: must be < 1 (the stage must keep some of its own records)")
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
