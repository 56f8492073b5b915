"""Whether a reward function changed the inputs TRL passed it: a cheap fingerprint taken before and after each call.

TRL 1.16 (`GRPOTrainer._calculate_rewards`) passes the same `prompts`, `completions` and `completion_ids` lists,
and the same per-sample column lists, to every reward function of a step in turn. A reward that edits them in place
(appends to `completions`, strips a message of a conversational completion, rewrites a `names` column) changes
what every later reward scores, without a word, or surfaces later as another reward's wrong length. The fingerprint
holds one hash per item of each input (its length, so), built from the values themselves: about 10 ms for 64
completions of 16 KB and their 4,096 token ids each, most of it the ids.

Left out: TRL's handles, which are not data a reward scores (`trainer_state`, `log_extra`, `log_metric`, and
`environments`, whose per-completion objects a reward may drive).
"""

from __future__ import annotations

from collections.abc import Mapping

#: keywords of TRL's call that are handles, not inputs (TRL 1.16 `_calculate_rewards`)
HANDLES = frozenset({"trainer_state", "log_extra", "log_metric", "environments"})
_ATOMS = frozenset({str, bytes, int, float, bool, type(None)})  # hashed by value


def digest(value) -> int:
    """A hash of `value` by its contents: lists, tuples and dicts by their items, the other values TRL passes (str,
    numbers, None) by their own hash, anything unhashable by its repr.

    >>> digest([1, "a", {"k": [2]}]) == digest([1, "a", {"k": [2]}]), digest([1, 2]) == digest([1, 3])
    (True, False)
    """
    kind = type(value)
    if kind in _ATOMS:
        return hash(value)
    if kind in (list, tuple):
        try:  # token ids, names: hashed in C, without a call per item
            return hash((kind, tuple(value)))
        except TypeError:  # an item is a list or a dict (a conversational completion's messages)
            return hash((kind, tuple(map(digest, value))))
    if kind is dict:
        return hash((dict, tuple((digest(key), digest(item)) for key, item in value.items())))
    try:
        return hash((kind, value))
    except TypeError:
        return hash((kind, repr(value)))


def fingerprint(kwargs: Mapping) -> dict[str, tuple[int, ...]]:
    """One hash per item of each input of a reward call (a value that is not a list or tuple: one hash of it)."""
    return {key: tuple(map(digest, value)) if isinstance(value, (list, tuple)) else (digest(value),)
            for key, value in kwargs.items() if key not in HANDLES}


def changed_input(before: Mapping[str, tuple[int, ...]], kwargs: Mapping) -> str | None:
    """What of the inputs `kwargs` differs from their fingerprint `before` ("completions: 4 items, then 5",
    "completions[2]"), None when nothing does.

    >>> completions = ["a", "b"]
    >>> before = fingerprint({"completions": completions, "trainer_state": object()})
    >>> changed_input(before, {"completions": completions})
    >>> completions.append("c"); changed_input(before, {"completions": completions})
    'completions: 2 items, then 3'
    """
    after = fingerprint(kwargs)
    for key, hashes in before.items():
        now = after[key]
        if now == hashes:
            continue
        if len(now) != len(hashes):
            return f"{key}: {len(hashes)} items, then {len(now)}"
        first = next(i for i, (old, new) in enumerate(zip(hashes, now, strict=True)) if old != new)
        return f"{key}[{first}]" if isinstance(kwargs.get(key), (list, tuple)) else key
    return None
