"""run.json (the manifest): its one writer (`Manifest`), its reader, its status transitions, and config.yaml checked
against a resume's config. It is rewritten whole and atomically on every change; with many processes every rank keeps
the same manifest and only the main process `writes` it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from core.checks import ConfigError, is_int
from core.parse_limits import ParseLimitError, parse_yaml
from core.rundir.files import CONFIG, RUN_JSON, STAGES, read_mapping, write_json_atomic, write_text_regular
from core.rundir.records import StageRecord, StageResult, Status, entry_problem, stage_records

# run.json's record of config.yaml's bytes as the run wrote them
CONFIG_FILE_HASH = "config_file_sha256"


def config_hash(resolved: Mapping, free_keys: Sequence[str]) -> str:
    """Hash of the training-relevant part of a resolved config: `free_keys` (at most two deep) left out."""
    plain = {k: dict(v) if isinstance(v, dict) else v for k, v in resolved.items()}  # the pops below stay here
    for key in free_keys:
        head, _, tail = key.partition(".")
        if tail and isinstance(plain.get(head), dict):
            plain[head].pop(tail, None)
        elif not tail:
            plain.pop(head, None)
    return hashlib.sha256(json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()[:16]


def config_file_hash(text: str | bytes) -> str:
    """sha256 of config.yaml's bytes, as run.json records them when the file is written."""
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def check_config_file(run_dir: Path, resolved: Mapping, recorded: str | None, free_keys: Sequence[str]) -> None:
    """Refuse (ConfigError) a config.yaml other than the one the run wrote (`recorded`: its hash), naming the first
    changed key. Refused rather than rewritten: the edit is someone's work. A missing file is written again."""
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
        changed = _differing(old, new, free_keys)
        if changed:
            what = (f"first changed key {changed[0]}: {old.get(changed[0])!r} in the file, the run's "
                    f"{new.get(changed[0])!r}")
    raise ConfigError(f"resume={run_dir}: {path} was edited after the run wrote it ({what}); the run trains on "
                      "the values it started with, not the file's: put the file back as it was, or start a new run "
                      "with the edited config")


def changed_keys(config_file: Path, resolved: Mapping, free_keys: Sequence[str]) -> list[str]:
    """Dotted keys whose value differs between a run's `config.yaml` and a resolved config (`free_keys` left out)."""
    if not config_file.exists():
        return []
    return _differing(file_values(config_file), _flatten(dict(resolved)), free_keys)


def file_values(config_file: Path) -> dict:
    """A run's `config.yaml` as dotted keys and values (interpolations as written), read within core.parse_limits'
    limits (ParseLimitError); yaml.YAMLError or ValueError when it is not YAML of config keys."""
    data = parse_yaml(config_file.read_text(), str(config_file))
    if not isinstance(data, dict):
        raise ValueError(f"{config_file}: a YAML {type(data).__name__}, not a config's keys")
    return _flatten(data)


def _differing(old: Mapping, new: Mapping, free_keys: Sequence[str]) -> list[str]:
    """The dotted keys whose values differ between two flattened configs, `free_keys` left out."""
    return sorted(k for k in old.keys() | new.keys()
                  if old.get(k) != new.get(k) and not any(k == f or k.startswith(f"{f}.") for f in free_keys))


def _flatten(tree, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists and empty mappings are leaves."""
    if not isinstance(tree, dict) or not tree:
        return {prefix: tree}
    flat = {}
    for key, value in tree.items():
        flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


# The statuses a stage may move to from each: a resume trains a running, trained or failed stage again or adopts its
# published final; a done stage whose final is damaged goes back to pending
STAGE_TRANSITIONS: dict[Status, frozenset[Status]] = {
    Status.PENDING: frozenset({Status.RUNNING, Status.TRAINED, Status.FAILED}),
    Status.RUNNING: frozenset({Status.RUNNING, Status.TRAINED, Status.FAILED}),
    Status.TRAINED: frozenset({Status.RUNNING, Status.TRAINED, Status.DONE, Status.FAILED}),
    Status.FAILED: frozenset({Status.RUNNING, Status.TRAINED, Status.FAILED}),
    Status.DONE: frozenset({Status.PENDING}),
}
RUN_STATUSES = frozenset({Status.RUNNING, Status.DONE, Status.FAILED})


def check_process_count(run_dir: Path, world_size: int) -> None:
    """Refuse (ConfigError) to continue the run in `run_dir` on another number of processes than its run.json
    records: each step's batch counts them. Nothing to check without a readable run.json.

    >>> check_process_count(Path("/nonexistent"), 2)
    """
    recorded = read_mapping(run_dir / RUN_JSON)
    trained_on = recorded.get("world_size", 1)  # run.json written before many processes: one
    if recorded and trained_on != world_size:
        raise ConfigError(
            f"resume={run_dir}: the run trains on {trained_on} process(es), this launch has {world_size}; every "
            f"step's batch counts the processes (per-device batch x {trained_on}): resume it with {trained_on} "
            f"(torchrun --nproc_per_node {trained_on}, or accelerate launch --num_processes {trained_on}), "
            "or start a new run"
        )


def check_same_config(run_dir: Path, resolved: Mapping, planned: list[str], free_keys: Sequence[str]) -> None:
    """Refuse (ConfigError) to resume `run_dir` with another config than it started with, naming the keys that
    differ (`free_keys` may); a damaged run.json is a RuntimeError. Runs before anything in the run is removed.

    >>> check_same_config(Path("/nonexistent"), {}, [], [])
    """
    path = run_dir / RUN_JSON
    if not path.exists():
        return
    manifest = read_manifest(path, planned)
    recorded, digest = manifest["config_hash"], config_hash(resolved, free_keys)
    if recorded != digest:
        try:
            changed = ", ".join(changed_keys(run_dir / CONFIG, resolved, free_keys)) or "keys not recorded"
        except ParseLimitError as err:  # a run folder someone sent: its keys are not read, the file is named
            changed = f"keys not read ({err})"
        except (yaml.YAMLError, ValueError):
            changed = f"keys not read ({run_dir / CONFIG} is not YAML)"
        raise ConfigError(
            f"resume={run_dir}: the config differs from the one this run was started with (hash {recorded} vs "
            f"{digest}) in {changed}; resume with the values in {run_dir / CONFIG}, or start a new run"
        )
    check_config_file(run_dir, resolved, manifest.get(CONFIG_FILE_HASH), free_keys)


class Manifest:
    """run.json: the run's fields, and per stage a `StageRecord` changed only through the steps of its life below."""

    def __init__(self, path: Path, data: Mapping, *, writes: bool = True):
        self.path, self.writes = path, writes
        self.fields = {k: v for k, v in data.items() if k != "stages"}
        self.stages = stage_records(data)

    @classmethod
    def open(cls, run_dir: Path, resolved: dict, planned: Sequence[StageRecord], world_size: int = 1, *,
             free_keys: Sequence[str]) -> Manifest:
        """Load run.json from `run_dir` (resume) or start one; config.yaml written beside it where missing."""
        path = run_dir / RUN_JSON
        digest = config_hash(resolved, free_keys)
        if path.exists():
            names = [str(record.name) for record in planned]
            check_same_config(run_dir, resolved, names, free_keys)
            manifest = cls(path, read_manifest(path, names))
        else:
            manifest = cls(path, {
                "run_dir": str(run_dir),
                "config_hash": digest,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "status": Status.RUNNING,
                "curriculum": (resolved.get("curriculum") or {}).get("name", "custom"),
                "base_model": None,
                "reference": str(resolved["reference"]),
                "world_size": world_size,
                "baseline": None,
                "stages": [dataclasses.asdict(record) for record in planned],
            })
        # config.yaml written where missing, its hash recorded so a resume can tell an edited file; one there is kept
        config_file = run_dir / CONFIG
        if not config_file.exists():
            write_text_regular(config_file, OmegaConf.to_yaml(OmegaConf.create(dict(resolved))))
            written = config_file_hash(config_file.read_bytes())  # the bytes on disk, whatever the locale's encoding
            if path.exists():  # written again in a resumed run: its hash replaces the old file's
                manifest.update(**{CONFIG_FILE_HASH: written})
            else:
                manifest.fields[CONFIG_FILE_HASH] = written
        elif CONFIG_FILE_HASH not in manifest.fields and not path.exists():  # a kill before run.json was written
            manifest.fields[CONFIG_FILE_HASH] = config_file_hash(config_file.read_bytes())
        if not path.exists():
            manifest.save()
        return manifest

    @property
    def data(self) -> dict:
        """run.json as it is written."""
        return {**self.fields, "stages": [dataclasses.asdict(s) for s in self.stages]}

    def save(self) -> None:
        if self.writes:
            write_json_atomic(self.path, self.data)

    def update(self, **fields) -> None:
        """Change the run's own fields (not its stages'); a status must be a run's."""
        if "status" in fields:
            fields["status"] = Status(fields["status"])
            if fields["status"] not in RUN_STATUSES:
                raise ValueError(f"run status {fields['status']} is not one of running, done, failed")
        self.fields.update(fields)
        self.save()

    def record(self, index: int) -> StageRecord:
        """Stage `index` (1-based)."""
        return self.stages[index - 1]

    def global_step_before(self, index: int) -> int:
        """Global steps completed by the stages before `index` (where this stage's steps start)."""
        return sum(s.steps_done or 0 for s in self.stages[: index - 1])

    def update_stage(self, index: int, **fields) -> None:
        """Change stage `index`'s fields; a status change `STAGE_TRANSITIONS` refuses raises ValueError."""
        record = self.record(index)
        if "status" in fields:
            before, after = Status(record.status), Status(fields["status"])
            if after not in STAGE_TRANSITIONS[before]:
                allowed = ", ".join(sorted(s.value for s in STAGE_TRANSITIONS[before]))
                raise ValueError(f"stage {record.name}: status {before} -> {after} is not allowed ({before} may "
                                 f"become {allowed})")
            fields["status"] = after
        self.stages[index - 1] = dataclasses.replace(record, **fields)
        self.save()

    # A stage's life, in order: pools drawn, (checkpoints skipped), started (running), (guard events), ended (`end`),
    # trained, validated (done, with `final_metrics` and `validation_cost`); or failed, or reset.

    def pools_drawn(self, removed_overlap: Mapping[str, int]) -> None:
        """How many held-out puzzles each stage's training pool dropped, by stage name."""
        self.stages = [dataclasses.replace(s, removed_overlap=removed_overlap[s.name]) for s in self.stages]
        self.save()



    def guard_event(self, index: int, event: dict) -> None:
        """Add a collapse-guard event, once: a resumed stage may log the same step again."""
        events = self.record(index).guard_events
        if all((e["stage_step"], e["signal"]) != (event["stage_step"], event["signal"]) for e in events):
            self.update_stage(index, guard_events=[*events, event])

    def checkpoints_skipped(self, index: int, skipped: list[dict]) -> None:
        """Trainer checkpoints a resume passed over (incomplete or damaged), each once with why."""
        known = self.record(index).skipped_checkpoints
        fresh = [s for s in skipped if s not in known]
        if fresh:
            self.update_stage(index, skipped_checkpoints=[*known, *fresh])

    def stage_warning(self, index: int, event: dict) -> None:
        """Add a warning (a reward that scored a whole batch with nothing), once per reward and kind."""
        warnings = self.record(index).warnings
        if all((w.get("reward"), w.get("warning")) != (event.get("reward"), event.get("warning")) for w in warnings):
            self.update_stage(index, warnings=[*warnings, event])

    def stage_trained(self, index: int, result: StageResult) -> None:
        """The stage's final is published: its steps continue the global count from the stages before it."""
        start = self.global_step_before(index)
        self.update_stage(
            index, status=Status.TRAINED, checkpoint=result.checkpoint, steps_done=result.steps_done,
            global_step_start=start, global_step_end=start + result.steps_done,
            policy_fingerprint=result.policy_fingerprint, reference=result.reference,
            reference_fingerprint=result.reference_fingerprint, resumed_from=result.resumed_from,
            wall_seconds=result.wall_seconds, final_fingerprints=result.final_fingerprints,
            distributed=result.distributed, final_marker=result.final_marker,
        )

    @property
    def world_size(self) -> int:
        """The processes the run trains on (run.json written before many processes: one)."""
        return self.fields.get("world_size", 1)

    def stage_failed(self, index: int, error: str) -> None:
        """Failed with `error`, its one line."""
        self.update_stage(index, status=Status.FAILED, error=error)

    def stage_reset(self, index: int) -> None:
        """Back to pending, naming no final: its final is gone, and the stage is trained again."""
        self.update_stage(index, status=Status.PENDING, checkpoint=None, final_marker=None)


def read_manifest(path: Path, planned: list[str]) -> dict:
    """run.json, or an error naming it (it is replaced atomically: damage came from outside the run)."""
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
    stages = data.get("stages")
    if not isinstance(stages, list) or not all(isinstance(s, dict) for s in stages):
        raise RuntimeError(f"{path}: its stages are not a list of stage entries; restore it, or start a new run")
    if data.get("status") not in {s.value for s in RUN_STATUSES}:
        raise RuntimeError(f"{path}: status {data.get('status')!r} is not one of running, done, failed (a run's); "
                           "restore it, or start a new run")
    threads = data.get("cpu_threads")
    if threads is not None and not (is_int(threads) and threads > 0):
        raise RuntimeError(f"{path}: cpu_threads {threads!r} is not a whole number > 0 (the CPU threads the run "
                           "trains with); restore it, or start a new run")
    if len(stages) != len(planned):
        raise RuntimeError(f"{path}: {len(stages)} stage entries for a plan of {len(planned)}; restore it, or start "
                           "a new run")
    for entry, name in zip(stage_records(data), planned, strict=True):
        problem = entry_problem(entry, name)
        if problem:
            raise RuntimeError(f"{path}: stage {entry.index} ({name}): {problem}; restore it, or start a new run")
    return data
