"""The run manifest (`run.json`): its writer, which holds statuses to the run-directory contract.

`run.json` is rewritten whole on every change, through a temporary file and `os.replace`, so a
kill at any moment leaves either the old or the new manifest, never half of one.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from core.rundir import CONFIG, RUN_JSON, STAGES, StageRecord, Status, run_status, stage_transition, write_json_atomic
from curriculum.plan import Stage

# Keys that may differ between a run and its resume without changing what is trained.
RESUME_FREE_KEYS = (
    "resume", "run_name", "logger", "paths", "hydra", "cpu_threads",
    "on_damaged_checkpoint", "keep_trainer_checkpoints", "eval.batch_size", "eval.backend",
)


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
        path = run_dir / RUN_JSON
        digest = config_hash(cfg)
        if path.exists():
            data = _read_manifest(path)
            if data["config_hash"] != digest:
                changed = changed_keys(run_dir / CONFIG, cfg)
                raise RuntimeError(
                    f"resume={run_dir}: the config differs from the one this run was started with "
                    f"(hash {data['config_hash']} vs {digest}) in {', '.join(changed) or 'keys not recorded'}; "
                    f"resume with the values in {run_dir / CONFIG}, or start a new run"
                )
            return cls(path, data)
        data = {
            "run_dir": str(run_dir),
            "config_hash": digest,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "status": Status.RUNNING,
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

    def record(self, index: int) -> StageRecord:
        """Stage `index` (1-based) as a typed record."""
        return StageRecord.from_json(self.stage(index))

    @property
    def config_hash(self) -> str:
        return self.data["config_hash"]

    @property
    def baseline(self) -> dict | None:
        """The baseline validation's summary ("<n>ppl" -> accuracy, mean_tokens), None until it ran."""
        return self.data["baseline"]

    def update_stage(self, index: int, **fields) -> None:
        """Change stage `index`'s fields; a status change must be one the contract allows."""
        entry = self.stage(index)
        if "status" in fields:
            fields["status"] = stage_transition(entry["name"], entry["status"], fields["status"])
        entry.update(fields)
        self.save()

    def update(self, **fields) -> None:
        if "status" in fields:
            fields["status"] = run_status(fields["status"])
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
            f"restore it from a backup to resume (nothing under {path.parent / STAGES} was touched), "
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
        "status": Status.PENDING,
        "steps_done": 0,
        "checkpoint": None,  # relative to the run directory
        "policy_init": None,
        "reference": None,
        "wall_seconds": None,
        "final_metrics": {},
    }
