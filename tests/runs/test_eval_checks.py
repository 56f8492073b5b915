"""What `python -m eval model=<folder>` refuses before any model loads, each in one line naming it: a folder that
is no checkpoint, a final that is not the one its marker or its run recorded (swapped, damaged), a run
config.yaml it cannot read (never a silent fall back to the GPU-sized defaults), and a final of another task.
The finals here are crafted (their bytes are never loaded): published as a run publishes them, marker last."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from core.checks import ConfigError
from core.rundir.records import FINAL_MARKER, folder_digests, marker_digest
from eval.__main__ import run_config
from eval.checkpoint import check_final, check_task, check_tokenizer_files, checkpoint_source, run_cpu_threads
from tests.conftest import compose_cfg, run_cli


def publish(final: Path, stage: str, task: str = "kk") -> str:
    """A final as a run publishes it (its files, then its marker with their digests); returns the marker's sha256."""
    final.mkdir(parents=True)
    (final / "config.json").write_text("{}")
    (final / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}')
    (final / "model.safetensors").write_bytes(f"the weights of stage {stage}".encode())
    files = folder_digests(final, exclude=(FINAL_MARKER,))  # every file but the marker itself
    marker = {"stage": stage, "config_hash": "c0ffee", "task": task, "files": files}
    (final / FINAL_MARKER).write_text(json.dumps(marker))
    return marker_digest(final)


@pytest.fixture
def run(tmp_path) -> Path:
    """A run folder whose two stages' finals run.json records, with the config.yaml a smoke run writes."""
    run = tmp_path / "run"
    stages = [{"index": i, "name": name, "status": "done", "checkpoint": f"stages/{i}-{name}/final",
               "final_marker": publish(run / "stages" / f"{i}-{name}" / "final", name)}
              for i, name in ((1, "a"), (2, "b"))]
    (run / "run.json").write_text(json.dumps({"config_hash": "c0ffee", "status": "done", "stages": stages}))
    cfg = compose_cfg(None, "+curriculum=kk_ladder", "experiment=smoke")
    (run / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    return run


def final(run: Path, dirname: str = "1-a") -> str:
    return str(run / "stages" / dirname / "final")


def swap(run: Path) -> None:
    a, b = Path(final(run, "1-a")), Path(final(run, "2-b"))
    a.rename(a.with_name("x"))
    b.rename(a)
    a.with_name("x").rename(b)


def flip(run: Path) -> None:
    weights = Path(final(run)) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"X")


def remove_run_json(run: Path) -> None:
    (run / "run.json").unlink()


def run_json_linked_out(run: Path) -> None:
    outside = run.parent / "elsewhere.json"
    (run / "run.json").rename(outside)
    (run / "run.json").symlink_to(outside)


@pytest.mark.parametrize("change, refusal", [
    (None, None),  # the final its run recorded: validated
    # stage a's folder holds stage b's final, intact with its own marker
    (swap, r"not the final its run recorded for stage 1-a \(its stage.json names stage 'b', not 'a'"),
    (flip, r"not the final its run recorded for stage 1-a \(model.safetensors: its sha256 differs"),
    # run.json is what vouches for it: gone, or read only through a link out of the run, it vouches for nothing
    (remove_run_json, r"its run.json cannot vouch for it \(unreadable or missing\)"),
    (run_json_linked_out, r"its run.json cannot vouch for it \(unreadable or missing\)"),
])
def test_a_final_inside_its_run_is_validated_only_as_the_final_run_json_recorded(run, change, refusal):
    if change is not None:
        change(run)
    if refusal is None:
        check_final(final(run))
        return
    with pytest.raises(ConfigError, match=rf"model={final(run)}: .*{refusal}"):
        check_final(final(run))


def test_a_final_copied_out_of_its_run_is_checked_against_its_own_marker(run, tmp_path):
    copied = tmp_path / "copied"
    shutil.copytree(final(run), copied)
    check_final(str(copied))  # intact: no run to ask, its marker vouches for its files
    (copied / "model.safetensors").write_bytes(b"flipped")
    with pytest.raises(ConfigError, match=r"damaged since it was published \(model.safetensors: 7 bytes, \d+ when"):
        check_final(str(copied))


@pytest.mark.parametrize("trained, validated, refused", [
    ("gsm8k", "kk", True),  # a GSM8K final copied out of its run, validated with the default task: refused
    ("gsm8k", "gsm8k", False),
    (None, "kk", False),  # a final published before markers named the task: the size line says what is assumed
])
def test_a_final_is_validated_as_the_task_it_was_trained_on(tmp_path, trained, validated, refused):
    folder = tmp_path / "final"
    publish(folder, "a", task=trained)
    if not refused:
        check_task(str(folder), validated)
        return
    with pytest.raises(ConfigError, match=rf"task: model={folder} was trained on task {trained} \(its stage.json\), "
                                          rf"not {validated}"):
        check_task(str(folder), validated)


def no_tokenizer(folder: Path) -> None:
    (folder / "tokenizer_config.json").unlink()


def no_template(folder: Path) -> None:
    (folder / "tokenizer_config.json").write_text("{}")


@pytest.mark.parametrize("change, model, refusal", [
    # "Repo id must be in the form ..." from the hub client, for a path that exists
    (None, "final/model.safetensors", r"a file, not a checkpoint folder; give the folder that holds it"),
    # "chat_template not set" once the model had loaded
    (no_tokenizer, "final", r"no tokenizer_config.json beside its config.json: the folder holds no tokenizer"),
    (no_template, "final", r"its tokenizer has no chat template .* and model.chat is true"),
])
def test_a_folder_that_is_no_checkpoint_is_named_before_any_model_loads(tmp_path, change, model, refusal):
    publish(tmp_path / "final", "a")
    if change is not None:
        change(tmp_path / "final")
    with pytest.raises(ConfigError, match=rf"model={tmp_path / model}: {refusal}"):
        check_tokenizer_files(checkpoint_source(str(tmp_path / model)), chat=True)


def config_linked_out(run: Path) -> None:
    secret = run.parent / "secret.yaml"
    secret.write_text((run / "config.yaml").read_text())
    (run / "config.yaml").unlink()
    (run / "config.yaml").symlink_to(secret)


@pytest.mark.parametrize("change, refusal", [
    (lambda run: (run / "config.yaml").unlink(), r"missing, not a file, or a link out of the run folder"),
    (config_linked_out, r"missing, not a file, or a link out of the run folder"),  # never read through the link
    (lambda run: (run / "config.yaml").write_bytes(b"model: \xff\n"), r"not a readable config \('utf-8' codec"),
    (lambda run: (run / "config.yaml").write_text("- a list\n"), r"no model group"),
    (lambda run: (run / "config.yaml").write_text("model: {name: x}\nprompt: {}\n"), r"no eval group"),
])
def test_a_run_config_it_cannot_read_is_refused_not_replaced_by_the_defaults(run, change, refusal):
    run_config(run)  # the run's own: read
    change(run)
    with pytest.raises(ConfigError, match=rf"{run / 'config.yaml'}: {refusal}"):
        run_config(run)


@pytest.mark.parametrize("recorded, expected", [
    (3, 3),  # the run's count: validating with another could sum floats otherwise than the run did
    (None, None),  # a run recorded before the count was kept: this command's cpu_threads
    ("3", None),  # run.json is untrusted: a count that is not a whole number > 0 is not used
    (0, None),
])
def test_a_runs_final_is_validated_on_the_runs_thread_count(run, recorded, expected):
    manifest = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**manifest, "cpu_threads": recorded}))
    assert run_cpu_threads(final(run)) == expected


@pytest.mark.run
def test_python_m_eval_refuses_a_swapped_final_in_one_line(run, tmp_path):
    swap(run)
    done = run_cli("eval", f"model={final(run)}", f"hydra.run.dir={tmp_path / 'eval'}")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"config error: model={final(run)}: not the final its "
                                                           "run recorded for stage 1-a (its stage.json names stage 'b'")
