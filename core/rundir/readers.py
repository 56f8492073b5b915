"""A run read while it may be writing (a report, a sweep's objective): files read leniently, levels in their
natural order, validation summaries and the final accuracies.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from core.checks import is_number
from core.parse_limits import ParseLimitError, parse_json, parse_yaml
from core.rundir.confine import read_inside

log = logging.getLogger(__name__)


def row_level(row: Mapping) -> str | None:
    """The level a validation row is about: its `level` when that is a non-empty string, else None (a row read
    back is untrusted: a damaged one is left out, never a key of another type).

    >>> row_level({"level": "2steps"}), row_level({"level": ["2ppl"]}), row_level({"ppl": 3})
    ('2steps', None, None)
    """
    level = row.get("level")
    return level if isinstance(level, str) and level else None


def level_order(key: str) -> tuple:
    """A sort key that puts levels in their natural order: by the first number in them, then by text
    ("2ppl" < "10ppl", "5steps" < "6+steps", "level2" < "level10").

    >>> sorted(["10ppl", "2ppl", "6+steps", "5steps", "level10", "level2", "default"], key=level_order)
    ['2ppl', '5steps', '6+steps', '10ppl', 'default', 'level2', 'level10']
    """
    text = str(key)
    match = re.search(r"\d+", text)
    prefix = text[:match.start()] if match else text
    return (prefix, int(match.group()) if match else -1, text)


def validation_summary(rows: Iterable[Mapping]) -> dict:
    """run.json's summary of validation rows: {level: {accuracy, mean_tokens}}.

    >>> validation_summary([{"level": "2ppl", "accuracy": 0.5, "mean_tokens": 30.0, "n": 8}])
    {'2ppl': {'accuracy': 0.5, 'mean_tokens': 30.0}}
    """
    return {row_level(r): {"accuracy": r["accuracy"], "mean_tokens": r["mean_tokens"]} for r in rows}


def final_accuracy(manifest: Mapping) -> dict[str, float]:
    """Accuracy per level after the last stage, in level order; {} until that stage is validated.

    >>> final_accuracy({"stages": [{"final_metrics": {"3ppl": {"accuracy": 0.25}, "2ppl": {"accuracy": 0.5}}}]})
    {'2ppl': 0.5, '3ppl': 0.25}
    """
    stages = manifest.get("stages") or []
    final = (stages[-1].get("final_metrics") or {}) if stages else {}
    if not isinstance(final, Mapping):
        return {}
    found = {str(k): _number(v.get("accuracy")) for k, v in final.items() if isinstance(v, Mapping)}
    return {level: found[level] for level in sorted(found, key=level_order) if found[level] is not None}


def objective(name: str, accuracy: Mapping[str, float]) -> float | None:
    """The sweep objective `name` (mean_final_accuracy | final_accuracy_<level>) of the final accuracies;
    None when they do not hold it (nothing validated, or not that subset).

    >>> objective("mean_final_accuracy", {"2ppl": 0.5, "3ppl": 0.25})
    0.375
    >>> objective("final_accuracy_2ppl", {"2ppl": 0.5}), objective("final_accuracy_4ppl", {"2ppl": 0.5})
    (0.5, None)
    """
    if not accuracy:
        return None
    if name == "mean_final_accuracy":
        return sum(accuracy.values()) / len(accuracy)
    return accuracy.get(name.removeprefix("final_accuracy_")) if name.startswith("final_accuracy_") else None


def _number(value) -> float | None:
    return float(value) if is_number(value, finite=True) else None


# --- lenient readers (a run may be writing while it is read) ---------------------------------------


def load_file(path: Path, *, inside: Path | None = None):
    """A JSON (.json) or YAML file's data; None when it is missing or unreadable (a job not started). `inside`: a
    folder received from elsewhere (a report's run), which `path` is read from without following a link out of it."""
    try:
        raw = path.read_bytes() if inside is None else read_inside(inside, path)
        if raw is None:
            return None
        text = raw.decode()
        return parse_json(text, str(path)) if path.suffix == ".json" else parse_yaml(text, str(path))
    except ParseLimitError as err:  # beyond a limit: said, naming the file (a reader sees only None)
        log.warning("%s", err)
        return None
    except (OSError, ValueError, yaml.YAMLError):
        return None


def read_mapping(path: Path, *, inside: Path | None = None) -> dict:
    """`load_file` for a file that holds a mapping (run.json, config.yaml): {} when it does not."""
    data = load_file(path, inside=inside)
    return data if isinstance(data, dict) else {}
