"""The run manifest (`run.json`) and the append-only jsonl files of a run directory.

`run.json` is rewritten whole on every change, through a temporary file and `os.replace`, so a
kill at any moment leaves either the old or the new manifest, never half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from curriculum.plan import Stage

# Keys that may differ between a run and its resume without changing what is trained.
RESUME_FREE_KEYS = (
    "resume", "run_name", "logger", "paths", "hydra", "cpu_threads",
    "on_damaged_checkpoint", "keep_trainer_checkpoints", "eval.batch_size", "eval.backend",
)


def write_json_atomic(path: Path, payload) -> None:
    """Write JSON so that readers (and a resumed run after a kill) never see a partial file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as fh:
        json.dump(payload, fh, indent=2, default=str)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def config_hash(cfg: DictConfig) -> str:
    """Hash of the training-relevant config (RESUME_FREE_KEYS left out)."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    for key in RESUME_FREE_KEYS:
        head, _, tail = key.partition(".")
        if tail and isinstance(plain.get(head), dict):
            plain[head].pop(tail, None)
        elif not tail:
            plain.pop(head, None)
    return hashlib.sha256(json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Manifest:
    """run.json: the plan, and per stage its status, checkpoints, reference, steps, time and metrics."""

    def __init__(self, path: Path, data: dict):
        self.path, self.data = path, data

    @classmethod
    def open(cls, run_dir: Path, cfg: DictConfig, plan: list[Stage]) -> Manifest:
        """Load run.json from `run_dir` (resume) or start a new one; refuse a config that changed."""
        path = run_dir / "run.json"
        digest = config_hash(cfg)
        if path.exists():
            data = _read_manifest(path)
            if data["config_hash"] != digest:
                changed = changed_keys(run_dir / "config.yaml", cfg)
                raise RuntimeError(
                    f"resume={run_dir}: the config differs from the one this run was started with "
                    f"(hash {data['config_hash']} vs {digest}) in {', '.join(changed) or 'keys not recorded'}; "
                    f"resume with the values in {run_dir / 'config.yaml'}, or start a new run"
                )
            return cls(path, data)
        data = {
            "run_dir": str(run_dir),
            "config_hash": digest,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "status": "running",
            "curriculum": OmegaConf.select(cfg, "curriculum.name", default="custom"),
            "base_model": None,
            "reference": str(cfg.reference),
            "baseline": None,
            "stages": [_stage_entry(s) for s in plan],
        }
        manifest = cls(path, data)
        manifest.save()
        return manifest

    def save(self) -> None:
        write_json_atomic(self.path, self.data)

    def stage(self, index: int) -> dict:
        return self.data["stages"][index - 1]

    def update_stage(self, index: int, **fields) -> None:
        self.stage(index).update(fields)
        self.save()

    def update(self, **fields) -> None:
        self.data.update(fields)
        self.save()

    def global_step_before(self, index: int) -> int:
        """Global steps completed by the stages before `index` (where this stage's steps start)."""
        return sum(s["steps_done"] for s in self.data["stages"][: index - 1])


def _read_manifest(path: Path) -> dict:
    """run.json, or an error naming it: it is replaced atomically, so damage came from outside the run."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        state = "empty" if not path.read_text().strip() else f"truncated or damaged ({err.msg}, line {err.lineno})"
        raise RuntimeError(
            f"{path}: {state}. The run writes it atomically, so a copy, an edit or a full disk did this; "
            f"restore it from a backup to resume (nothing under {path.parent / 'stages'} was touched), "
            "or start a new run"
        ) from None
    if not isinstance(data, dict) or "config_hash" not in data:
        raise RuntimeError(f"{path}: not a run manifest (no config_hash); restore it, or start a new run")
    return data


def changed_keys(config_file: Path, cfg: DictConfig) -> list[str]:
    """Dotted keys whose value differs between a run's `config.yaml` and `cfg` (RESUME_FREE_KEYS left out)."""
    if not config_file.exists():
        return []
    old = _flatten(OmegaConf.to_container(OmegaConf.load(config_file), resolve=False))
    new = _flatten(OmegaConf.to_container(cfg, resolve=True))
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


def _stage_entry(stage: Stage) -> dict:
    return {
        "index": stage.index,
        "name": stage.name,
        "kind": stage.kind,
        "ppl": {str(k): v for k, v in stage.ppl_weights.items()},
        "pool_ppl": {str(k): v for k, v in stage.pool_weights.items()},  # with any replay of earlier ppl
        "ppl_label": stage.ppl_label,
        "steps_budget": stage.steps,
        "pool": stage.pool,
        "status": "pending",
        "steps_done": 0,
        "checkpoint": None,  # relative to the run directory
        "policy_init": None,
        "reference": None,
        "wall_seconds": None,
        "final_metrics": {},
    }


class JsonlWriter:
    """Append rows to a jsonl file, each flushed and fsynced, skipping rows already recorded.

    `key` names the fields that identify a row; a resumed run re-logs steps it redoes after the
    last checkpoint, and those rows must not appear twice.
    """

    def __init__(self, path: Path, key: tuple[str, ...]):
        self.path, self.key = path, key
        self.seen = {self._key(row) for row in read_jsonl(path, repair=True)}

    def _key(self, row: dict):
        return tuple(row.get(k) for k in self.key)

    def write(self, rows: Iterable[dict]) -> None:
        fresh = [r for r in rows if self._key(r) not in self.seen]
        if not fresh:
            return
        text = "".join(json.dumps(r, default=_json_default) + "\n" for r in fresh)
        try:
            with open(self.path, "a") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as err:
            # Appending never rewrites earlier rows; a torn last row is cut off when the file is reopened.
            raise RuntimeError(f"{self.path}: could not write ({err}); the rows already written are kept") from err
        self.seen.update(self._key(r) for r in fresh)


def _json_default(value):
    return value.item() if hasattr(value, "item") else str(value)


def read_jsonl(path: Path, *, repair: bool = False) -> list[dict]:
    """Rows of a jsonl file. A torn last line (a kill mid-write) is dropped, and cut off when `repair`."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    rows, good_bytes = [], 0
    for i, line in enumerate(lines):
        if not line.strip():
            good_bytes += len(line) + 1
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i >= len(lines) - 2:  # only the last line may be torn; anything else is real damage
                break
            raise ValueError(f"{path}:{i + 1}: not valid JSON") from None
        good_bytes += len(line) + 1
    if repair and good_bytes < len(raw):
        with open(path, "r+b") as fh:
            fh.truncate(min(good_bytes, len(raw)))
    return rows
