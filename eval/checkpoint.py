"""What `python -m eval model=<path or hub id>` is handed, checked before any model loads (each refusal a ConfigError
naming it): a checkpoint folder with its tokenizer files; a stage's final intact, the one its run recorded, validated
as the task it was trained on. A hub id is the hub's to check.
"""

from __future__ import annotations

from pathlib import Path

from core.checks import ConfigError, is_int
from core.models import HUB_ID
from core.parse_limits import parse_json
from core.rundir.files import RUN_JSON, load_file, run_of_final, stage_dirname
from core.rundir.records import FINAL_MARKER, final_info, final_problem, recorded_final_problem, stage_records

# What a tokenizer saved with `save_pretrained` always writes, and where a chat template is kept
TOKENIZER_CONFIG, CHAT_TEMPLATE_FILE = "tokenizer_config.json", "chat_template.jinja"
EXAMPLE = "such as <run>/stages/<k>-<name>/final"


def checkpoint_source(value: str) -> str:
    """`value` as a model to load: an existing checkpoint folder, or a hub id; else a clear error.

    >>> checkpoint_source("Qwen/Qwen2.5-0.5B-Instruct")
    'Qwen/Qwen2.5-0.5B-Instruct'
    >>> checkpoint_source("runs/x/final")
    Traceback (most recent call last):
    core.checks.ConfigError: model=runs/x/final: no such checkpoint folder (and not a hub id, which is org/name)
    """
    path = Path(value)
    if path.is_file():
        raise ConfigError(f"model={value}: a file, not a checkpoint folder; give the folder that holds it ({EXAMPLE})")
    if path.is_dir() and not (path / "config.json").exists():
        raise ConfigError(f"model={value}: a folder without config.json, not a checkpoint; give a checkpoint "
                          f"folder {EXAMPLE}")
    if path.exists() or HUB_ID.fullmatch(value):
        return value
    raise ConfigError(f"model={value}: no such checkpoint folder (and not a hub id, which is org/name)")


def check_tokenizer_files(value: str, *, chat: bool) -> None:
    """A checkpoint folder holds a tokenizer and, when prompts are chat messages (`model.chat`), a chat template."""
    path = Path(value)
    if not path.is_dir():
        return
    if not (path / TOKENIZER_CONFIG).is_file():
        raise ConfigError(f"model={value}: no {TOKENIZER_CONFIG} beside its config.json: the folder holds no "
                          "tokenizer; save it with the model (tokenizer.save_pretrained(<folder>))")
    if chat and not _has_chat_template(path):
        raise ConfigError(f"model={value}: its tokenizer has no chat template ({CHAT_TEMPLATE_FILE}, or chat_template "
                          f"in {TOKENIZER_CONFIG}) and model.chat is true; save one with the tokenizer, or set "
                          "model.chat=false to prompt with plain text")


def _has_chat_template(folder: Path) -> bool:
    if (folder / CHAT_TEMPLATE_FILE).is_file():
        return True
    try:
        config = parse_json((folder / TOKENIZER_CONFIG).read_text(), str(folder / TOKENIZER_CONFIG))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and bool(config.get("chat_template"))


def check_final(value: str) -> None:
    """A stage's final: intact and, inside its run folder, the one run.json recorded; anything else passes."""
    path = Path(value)
    run_dir = run_of_final(path.resolve())
    if run_dir is None:
        if (path / FINAL_MARKER).exists():
            problem = final_problem(path)
            if problem is not None:
                raise ConfigError(f"model={value}: damaged since it was published ({problem})")
        return
    problem = recorded_final_problem(path, _recorded_stage(value, run_dir, path.resolve().parent.name))
    if problem is not None:
        raise ConfigError(f"model={value}: not the final its run recorded for stage {path.resolve().parent.name} "
                          f"({problem}); restore it, or copy it out of the run folder to validate it as it is")


def _run_manifest(run_dir: Path) -> dict | None:
    """A run's run.json, read without following a link out of the run folder; None when it is not a mapping."""
    manifest = load_file(run_dir / RUN_JSON, inside=run_dir)
    return manifest if isinstance(manifest, dict) else None


def run_cpu_threads(value: str) -> int | None:
    """The CPU threads the run of a final inside its run folder used (another count sums floats otherwise), or None."""
    run_dir = run_of_final(Path(value).resolve())
    threads = (_run_manifest(run_dir) or {}).get("cpu_threads") if run_dir is not None else None
    return threads if is_int(threads) and threads > 0 else None


def _recorded_stage(value: str, run_dir: Path, dirname: str):
    """run.json's record of the stage whose folder is `dirname` (`<k>-<name>`); ConfigError when it records none."""
    manifest = _run_manifest(run_dir)
    found = [s for s in stage_records(manifest) if stage_dirname(s.index, s.name) == dirname] \
        if isinstance(manifest, dict) else []
    if not found:
        why = "unreadable or missing" if not isinstance(manifest, dict) else f"it records no stage {dirname}"
        raise ConfigError(f"model={value}: inside run folder {run_dir}, but its {RUN_JSON} cannot vouch for it ({why});"
                          " copy the final out of the run folder to validate it as it is")
    return found[0]


def check_task(value: str, task_name: str) -> None:
    """Refuse to validate a final as another task than the one its intact marker names; anything else passes."""
    info = final_info(Path(value)) if (Path(value) / FINAL_MARKER).exists() else None
    trained = info.get("task") if info else None
    if isinstance(trained, str) and trained != task_name:
        raise ConfigError(f"task: model={value} was trained on task {trained} (its {FINAL_MARKER}), not {task_name}; "
                          f"validate it as its task (task={trained} with its prompt), or copy its run's settings")
