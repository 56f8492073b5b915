"""The config error every check raises (here, below `plan` and `adaptive`, so both can raise it)."""


class ConfigError(ValueError):
    """A bad config value; the message starts with the dotted key that holds it."""
