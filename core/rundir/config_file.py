"""A run's `config.yaml` against the config a resume brings: the hash run.json keeps of each, and the keys named
where they differ (a resume with another config, a file edited after the run wrote it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

import yaml

from core.checks import ConfigError
from core.parse_limits import ParseLimitError, parse_yaml
from core.rundir.layout import CONFIG

# Keys that may differ between a run and its resume without changing what is trained (how many
# processes train is checked on its own: run.json's world_size): Hydra's node and the fields conf/schema.py marks
# `resume_free`. Named here because core/ is below conf/; tests/config/test_keys.py holds the two equal, so a
# field marked there and not here (or the reverse) fails.
RESUME_FREE_KEYS = (
    "resume", "run_name", "logger", "paths", "hydra", "cpu_threads", "launch", "rollouts", "finals",
    "on_damaged_checkpoint", "keep_trainer_checkpoints", "eval.batch_size", "eval.backend", "reward.timeout_s",
)


# run.json's record of config.yaml's bytes as the run wrote them
CONFIG_FILE_HASH = "config_file_sha256"


def config_hash(resolved: Mapping) -> str:
    """Hash of the training-relevant part of a resolved config (RESUME_FREE_KEYS left out)."""
    plain = {k: dict(v) if isinstance(v, dict) else v for k, v in resolved.items()}  # the pops below stay here
    for key in RESUME_FREE_KEYS:
        head, _, tail = key.partition(".")
        if tail and isinstance(plain.get(head), dict):
            plain[head].pop(tail, None)
        elif not tail:
            plain.pop(head, None)
    return hashlib.sha256(json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()[:16]


def config_file_hash(text: str | bytes) -> str:
    """sha256 of config.yaml's bytes, as run.json records them when the file is written."""
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def check_config_file(run_dir: Path, resolved: Mapping, recorded: str | None) -> None:
    """Refuse (ConfigError) a run whose config.yaml is not the file the run wrote (`recorded`: its hash in
    run.json), naming the first key whose value differs from the config the run trains on (`resolved`).

    Refused rather than rewritten: the edited file is someone's work, and a resume that put the recorded values
    back would lose it, while one that kept it would leave a file that says what the run never trained on. A run
    whose run.json records no hash (written before it did) and a missing file are not refused (Manifest.open
    writes the file again)."""
    path = run_dir / CONFIG
    if recorded is None or not path.is_file():
        return
    if config_file_hash(path.read_bytes()) == recorded:
        return
    what = "not the file the run wrote (its hash in run.json differs)"
    try:
        old, new = file_values(path), _flatten(dict(resolved))
    except ParseLimitError as err:  # a file crafted to take its reader down: named, never expanded
        what = f"not the file the run wrote; {err}"
    except (yaml.YAMLError, ValueError):  # not YAML any more: named all the same
        pass
    else:
        changed = _differing(old, new)
        if changed:
            what = (f"first changed key {changed[0]}: {old.get(changed[0])!r} in the file, the run's "
                    f"{new.get(changed[0])!r}")
    raise ConfigError(f"resume={run_dir}: {path} was edited after the run wrote it ({what}); the run trains on "
                      "the values it started with, not the file's: put the file back as it was, or start a new run "
                      "with the edited config")


def changed_keys(config_file: Path, resolved: Mapping) -> list[str]:
    """Dotted keys whose value differs between a run's `config.yaml` and a resolved config (RESUME_FREE_KEYS
    left out); the file is read as `file_values` reads it."""
    if not config_file.exists():
        return []
    return _differing(file_values(config_file), _flatten(dict(resolved)))


def file_values(config_file: Path) -> dict:
    """A run's `config.yaml` as dotted keys and values, read within core.parse_limits' limits (a run folder may be
    sent by someone: ParseLimitError naming the file beyond them, yaml.YAMLError or ValueError when it is not
    YAML, or YAML of no config keys); interpolations stay as written."""
    data = parse_yaml(config_file.read_text(), str(config_file))
    if not isinstance(data, dict):
        raise ValueError(f"{config_file}: a YAML {type(data).__name__}, not a config's keys")
    return _flatten(data)


def _differing(old: Mapping, new: Mapping) -> list[str]:
    """The dotted keys whose values differ between two flattened configs, RESUME_FREE_KEYS left out."""
    return sorted(k for k in old.keys() | new.keys()
                  if old.get(k) != new.get(k) and not any(k == f or k.startswith(f"{f}.") for f in RESUME_FREE_KEYS))


def _flatten(tree, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists and empty mappings are leaves."""
    if not isinstance(tree, dict) or not tree:
        return {prefix: tree}
    flat = {}
    for key, value in tree.items():
        flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat
