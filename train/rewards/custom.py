"""A user's own reward functions, by import path, the Hydra way.

    reward:
      custom:
        brevity: {_target_: my_pkg.rewards.brevity, _partial_: true, limit: 300}
      weights:
        brevity: 0.5        # like a built-in; 1.0 when not given

Each entry becomes one more TRL reward function, logged as `rewards/<name>/mean`. The function is
called as TRL 1.16 calls reward functions - keywords only: `prompts`, `completions`,
`completion_ids`, every dataset column (`id`, `level` and the task's `columns`), `trainer_state`,
`log_extra`, `log_metric` - and returns one float (or None) per completion. Everything is checked
here, before any model loads: the import path, that the bound keywords exist, and that TRL's call
binds to the signature.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping

from hydra.errors import InstantiationException
from hydra.utils import instantiate

from core.checks import ConfigError
from train.rewards.checks import Reward, reward

# The keywords GRPOTrainer passes to every reward function (TRL 1.16 `_calculate_rewards`), with the
# dataset columns every row has (`curriculum.tasks.base.task_row`); the task's own columns come beside them.
TRL_CALL_KEYWORDS = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric",
                     "id", "level")


def load_custom_reward(name: str, spec, reserved: tuple[str, ...], columns: tuple[str, ...] = ()) -> Reward:
    """The reward function of `reward.custom.<name>` under its key, checked against TRL's call with the task's
    `columns`; raises ConfigError naming the key. It logs the share it scores (`Reward.log_share`).

    >>> load_custom_reward("tokens", {"_target_": "train.rewards.probe.low_token_share", "below": 3}, ()).__name__
    'tokens'
    >>> load_custom_reward("x", {"_target_": "no.such.module.fn"}, ())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    core.checks.ConfigError: reward.custom.x._target_: cannot import 'no.such.module.fn' ...
    """
    key = f"reward.custom.{name}"
    if name in reserved:
        raise ConfigError(f"{key}: {name!r} is a built-in component's name; choose another")
    if not isinstance(spec, Mapping) or not spec.get("_target_"):
        raise ConfigError(f"{key}: expected {{_target_: pkg.module.function, _partial_: true, <keyword>: value}}")
    if spec.get("_partial_") is False:
        raise ConfigError(f"{key}._partial_: must be true (the function is called by the trainer, not at load)")
    try:
        func = instantiate({**spec, "_partial_": True})
    except InstantiationException as err:
        raise ConfigError(f"{key}._target_: cannot import {spec['_target_']!r} ({_first_line(err)})") from None
    target = func.func if isinstance(func, functools.partial) else func
    if not callable(target):
        raise ConfigError(f"{key}._target_: {spec['_target_']!r} is not a function")
    _check_signature(key, func, columns)
    return reward(name, func, log_share=True)  # the partial itself: TRL's keywords win over the bound ones


def _check_signature(key: str, func: Callable, columns: tuple[str, ...]) -> None:
    """TRL's call must bind: every bound keyword is a named parameter, nothing required is left unsupplied.

    A bound keyword that only `**kwargs` would swallow is a typo that would otherwise pass silently.
    """
    target = func.func if isinstance(func, functools.partial) else func
    named = {name for name, p in inspect.signature(target).parameters.items()
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    for bound in getattr(func, "keywords", {}):
        if bound not in named:
            raise ConfigError(f"{key}.{bound}: not a parameter of {getattr(target, '__name__', target)!r} "
                              f"(it takes {', '.join(sorted(named))})")
    signature = inspect.signature(func)
    try:
        signature.bind(**dict.fromkeys((*TRL_CALL_KEYWORDS, *columns)))
    except TypeError as err:
        raise ConfigError(
            f"{key}: the function cannot be called as GRPOTrainer calls reward functions ({err}); accept "
            "`completions` and `**kwargs`, and bind its own settings in the config"
        ) from None


def _first_line(err: BaseException) -> str:
    text = str(err.__cause__ or err).strip()
    return text.splitlines()[0] if text else type(err).__name__
