"""The config error every check raises, and the checked whole number both `plan` and `adaptive` read
(here, below both, so each can use them)."""


class ConfigError(ValueError):
    """A bad config value; the message starts with the dotted key that holds it."""


def whole_number(value, key: str, *, least: int = 1) -> int:
    """`value` as an int, or ConfigError naming `key` when it is not a whole number >= `least`.

    >>> whole_number(3.0, "steps")
    3
    >>> whole_number(0, "steps")
    Traceback (most recent call last):
    curriculum.errors.ConfigError: steps: must be a whole number > 0 (got 0)
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < least:
        bound = "> 0" if least == 1 else f">= {least}"
        raise ConfigError(f"{key}: must be a whole number {bound} (got {value!r})")
    return int(value)
