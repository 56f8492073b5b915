"""The config error every check raises, and the value checks that the config checks and the readers of
untrusted files share: a number that is not a bool, a whole number with a floor, a config as plain data.

The types of config keys are Hydra's to check (conf/schema.py); what is checked here is what a type
cannot say (a count > 0, a value read from a file someone sent).
"""

from __future__ import annotations

import math

from omegaconf import OmegaConf


class ConfigError(ValueError):
    """A bad config value; the message starts with the dotted key that holds it."""


def is_number(value, *, finite: bool = False) -> bool:
    """An int or a float, never a bool (YAML's and JSON's `true` is an int to Python); `finite`: not nan or inf.

    >>> is_number(2), is_number(0.5), is_number(True), is_number("2"), is_number(float("nan"), finite=True)
    (True, True, False, False, False)
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) if finite else True


def is_int(value) -> bool:
    """An int, never a bool.

    >>> is_int(3), is_int(3.0), is_int(False)
    (True, False, False)
    """
    return is_number(value) and isinstance(value, int)


def whole_number(value, key: str, *, least: int = 1) -> int:
    """`value` as an int, or ConfigError naming `key` when it is not a whole number >= `least`.

    >>> whole_number(3.0, "steps")
    3
    >>> whole_number(0, "steps")
    Traceback (most recent call last):
    core.checks.ConfigError: steps: must be a whole number > 0 (got 0)
    """
    if not is_number(value, finite=True) or int(value) != value or value < least:
        bound = "> 0" if least == 1 else f">= {least}"
        raise ConfigError(f"{key}: must be a whole number {bound} (got {value!r})")
    return int(value)


def plain(value):
    """A config node as plain Python data (interpolations resolved, a choice as its name); anything else as it is.

    >>> plain(OmegaConf.create({"a": "${b}", "b": 1}))
    {'a': 1, 'b': 1}
    """
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True, enum_to_str=True)
    return value
