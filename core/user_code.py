"""The user's code (a reward function, a task's grader) ending the process with `SystemExit`: a failure of the run.

`sys.exit(0)` in a reward would otherwise end the run with code 0 and no word, its run.json left running;
`sys.exit(3)` in a grader with code 3, nothing printed and no error.txt. Raised again as `UserCodeExit` (a
RuntimeError), naming whose code raised it, it fails the stage and the run as any other error of that code does:
run.json and error.txt record it. Ctrl-C (KeyboardInterrupt) is not a SystemExit and passes as it does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


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
