"""The config error every check raises, the value checks config checks and readers of untrusted files share, and
`UserCodeExit`: the user's code calling `sys.exit` would end the run with no word, its run.json left running.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

from omegaconf import OmegaConf

T = TypeVar("T")


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


class UserCodeExit(RuntimeError):
    """SystemExit raised by the user's code, as the failure it is."""


def exit_failure(who: str, err: SystemExit) -> UserCodeExit:
    """The failure for `err` raised by `who` ("reward brevity", "task kk's grade").

    >>> print(exit_failure("reward brevity", SystemExit(0)))  # doctest: +NORMALIZE_WHITESPACE
    reward brevity: raised SystemExit(0), which would end the whole run; it is a failure of the run: return its
    result, or raise an error that says what is wrong
    """
    return UserCodeExit(f"{who}: raised SystemExit({err.code!r}), which would end the whole run; it is a failure "
                        "of the run: return its result, or raise an error that says what is wrong")


def call_user_code(who: str, func: Callable[..., T], *args, **kwargs) -> T:
    """`func(*args, **kwargs)`, its SystemExit raised as the `UserCodeExit` naming `who`."""
    try:
        return func(*args, **kwargs)
    except SystemExit as err:
        raise exit_failure(who, err) from err
