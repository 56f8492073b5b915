"""Failure drills: what happens when things go wrong mid-run. Each leaves nothing written lost."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil

import pytest
from transformers import TrainerCallback

from core.checks import ConfigError
from core.rundir.files import JsonlWriter, read_jsonl
from core.rundir.records import final_info
from tests.conftest import compose_cfg
from train.run.runner import run_curriculum
from train.run.stage_end import DivergenceStop, NonFiniteLossError
from train.settings import read_settings
from train.stages.training import scan_checkpoints

KEPT = ["+curriculum=kk_ladder", "experiment=smoke", "keep_trainer_checkpoints=true",
        "curriculum.stages=[{name: a, ppl: 2, steps: 2, pool: 8}, {name: b, ppl: 3, steps: 2, pool: 8}]"]


@pytest.fixture(scope="module")
def kept_run(tmp_path_factory, cache_dir):
    """A two-stage smoke run that keeps its trainer checkpoints (for the checkpoint drills)."""
    run_dir = tmp_path_factory.mktemp("kept")
    cfg = compose_cfg(cache_dir, *KEPT)
    run_curriculum(read_settings(cfg), run_dir)
    return run_dir, cfg


@pytest.mark.run
def test_a_half_written_trainer_checkpoint_is_never_resumed_from(kept_run, tmp_path):
    run_dir, _ = kept_run
    trainer = tmp_path / "trainer"
    shutil.copytree(run_dir / "stages" / "1-a" / "trainer", trainer)
    complete = scan_checkpoints(trainer).usable
    assert complete is not None and complete.name == "checkpoint-2"
    # a kill during the save of step 3: weights written, trainer_state.json (written last) not yet
    torn = trainer / "checkpoint-3"
    shutil.copytree(complete, torn)
    (torn / "trainer_state.json").unlink()
    assert scan_checkpoints(trainer).usable == complete
    # a kill while trainer_state.json itself was being written
    (torn / "trainer_state.json").write_text('{"global_step": 3, "log_hist')
    assert scan_checkpoints(trainer).usable == complete


@pytest.mark.run
def test_a_final_without_its_marker_is_not_handed_off(kept_run, tmp_path):
    run_dir, _ = kept_run
    final = tmp_path / "final"
    shutil.copytree(run_dir / "stages" / "1-a" / "final", final)
    assert final_info(final)["steps_done"] == 2
    (final / "stage.json").unlink()  # a kill between writing the weights and publishing them
    assert final_info(final) is None


def _damage_first_final(run_dir):
    manifest = json.loads((run_dir / "run.json").read_text())
    manifest["stages"][1]["status"] = "pending"  # stage b still has to start from stage a's final
    (run_dir / "run.json").write_text(json.dumps(manifest))
    (run_dir / "stages" / "1-a" / "final" / "model.safetensors").unlink()


@pytest.mark.run
def test_a_missing_stage_checkpoint_is_named(kept_run, tmp_path):
    source, cfg = kept_run
    run_dir = tmp_path / "run"
    shutil.copytree(source, run_dir)
    _damage_first_final(run_dir)
    with pytest.raises(RuntimeError, match=r"stage a: its final checkpoint .*1-a/final is missing or damaged"):
        run_curriculum(read_settings(cfg), run_dir)


@pytest.mark.run
def test_a_missing_stage_checkpoint_can_be_retrained(kept_run, tmp_path, cache_dir):
    source, cfg = kept_run
    run_dir = tmp_path / "run"
    shutil.copytree(source, run_dir)
    _damage_first_final(run_dir)
    cfg.on_damaged_checkpoint = "retrain"
    run_curriculum(read_settings(cfg), run_dir)
    manifest = json.loads((run_dir / "run.json").read_text())
    assert [s["status"] for s in manifest["stages"]] == ["done", "done"]
    assert final_info(run_dir / "stages" / "1-a" / "final") is not None


class PoisonGradients(TrainerCallback):
    """A numerical blow-up in the backward pass of one stage: its gradients turn NaN."""

    def __init__(self, stage_name: str):
        self.stage_name = stage_name

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if args.output_dir.endswith(f"-{self.stage_name}/trainer"):
            next(model.parameters()).register_hook(lambda grad: grad * float("nan"))


@pytest.mark.run
def test_nan_stops_the_stage_and_keeps_what_was_done(tmp_path, make_cfg):
    run_dir = tmp_path / "run"
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke",
                   "curriculum.stages=[{name: a, ppl: 2, steps: 2, pool: 8}, {name: b, ppl: 3, steps: 4, pool: 8}]")
    with pytest.raises(NonFiniteLossError, match="stage b: the weights became non-finite"):
        run_curriculum(read_settings(cfg), run_dir, callbacks=(PoisonGradients("b"),))
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["status"] == "failed"
    assert manifest["stages"][0]["status"] == "done" and final_info(run_dir / "stages" / "1-a" / "final")
    assert manifest["stages"][1]["status"] == "failed" and "non-finite" in manifest["stages"][1]["error"]
    assert not (run_dir / "stages" / "2-b" / "final").exists(), "a diverged stage publishes no final"
    assert scan_checkpoints(run_dir / "stages" / "2-b" / "trainer").usable is None, "NaN weights never saved"


@pytest.mark.parametrize("logs, stopped", [
    ({"loss": float("nan")}, "loss (nan)"),
    # two rewards of 3e38 at weight 1, each within float32, sum to inf in TRL's float32 total
    ({"loss": 0.0, "reward": float("inf")}, "reward (inf)"),
    ({"loss": 0.1, "reward": 0.5}, None),  # a finite step trains on
])
def test_a_non_finite_loss_or_reward_in_the_log_stops_the_stage(logs, stopped):
    callback = DivergenceStop(stage_name="a")
    state = type("State", (), {"global_step": 3})()
    if stopped is None:
        callback.on_log(None, state, None, logs=logs)
        return
    expected = rf"stage a: the {re.escape(stopped)} became non-finite \(nan/inf\) at step 3"
    with pytest.raises(NonFiniteLossError, match=expected):
        callback.on_log(None, state, None, logs=logs)


def test_a_full_disk_stops_with_a_clear_error_and_truncates_nothing(tmp_path, monkeypatch):
    path = tmp_path / "metrics.jsonl"
    writer = JsonlWriter(path, key=("step",))
    writer.write([{"step": i, "loss": 0.5} for i in range(3)])
    before = path.read_bytes()

    real_fdopen = os.fdopen

    class HalfFull:
        """A file whose write lands half the bytes, then reports ENOSPC."""

        def __init__(self, fh):
            self.fh = fh

        def write(self, text):
            self.fh.write(text[: len(text) // 2])
            self.fh.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

    monkeypatch.setattr(os, "fdopen", lambda *a, **k: HalfFull(real_fdopen(*a, **k)))
    with pytest.raises(RuntimeError, match=r"metrics.jsonl: could not write .*No space left"):
        writer.write([{"step": 3, "loss": 0.4}])
    monkeypatch.undo()
    assert path.read_bytes().startswith(before), "rows already written are untouched"
    reopened = JsonlWriter(path, key=("step",))  # a resumed run cuts the torn tail and goes on
    assert path.read_bytes() == before
    reopened.write([{"step": 3, "loss": 0.4}])
    assert [r["step"] for r in read_jsonl(path)] == [0, 1, 2, 3]


@pytest.mark.run
def test_a_prompt_longer_than_the_context_fails_before_anything_is_written(tmp_path, make_cfg):
    run_dir = tmp_path / "run"
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke", "model.context_length=200")
    with pytest.raises(ConfigError, match=r"^model.context_length: .* exceeds the context of 200"):
        run_curriculum(read_settings(cfg), run_dir)
    assert not (run_dir / "run.json").exists() and not (run_dir / "config.yaml").exists()


def _copy_without_manifest(source, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(source, run_dir)
    (run_dir / "run.json").unlink()
    return run_dir


@pytest.mark.run
def test_a_final_from_another_config_is_not_adopted(kept_run, tmp_path, make_cfg):
    source, cfg = kept_run
    run_dir = _copy_without_manifest(source, tmp_path)
    marker = (run_dir / "stages" / "1-a" / "final" / "stage.json").read_bytes()
    other = make_cfg(*KEPT, "grpo.learning_rate=0.5")
    with pytest.raises(RuntimeError, match=r"1-a/final: trained as stage 'a' with config \w+, not as stage 'a' of "
                                           r"this run \(config \w+\), so it is not adopted"):
        run_curriculum(read_settings(other), run_dir)
    assert (run_dir / "stages" / "1-a" / "final" / "stage.json").read_bytes() == marker, "the old final is untouched"


@pytest.mark.run
def test_a_final_of_this_config_is_adopted_without_training_again(kept_run, tmp_path):
    source, cfg = kept_run
    run_dir = _copy_without_manifest(source, tmp_path)
    metrics = (run_dir / "metrics.jsonl").read_bytes()
    run_curriculum(read_settings(cfg), run_dir)
    manifest = json.loads((run_dir / "run.json").read_text())
    assert [(s["status"], s["steps_done"]) for s in manifest["stages"]] == [("done", 2), ("done", 2)]
    assert (run_dir / "metrics.jsonl").read_bytes() == metrics, "no step trained twice"


@pytest.mark.run
@pytest.mark.parametrize("damage, message", [
    ("", r"run.json: empty\."),  # a zero-byte copy
    ('{"run_dir": "x", "config_hash": "ab', r"run.json: truncated or damaged \(Unterminated string.*line 1\)"),  # torn
    ("[1, 2]", r"run.json: not a run manifest"),  # valid JSON, wrong file
])
def test_a_damaged_manifest_is_named_with_what_to_do(kept_run, tmp_path, damage, message):
    source, cfg = kept_run
    run_dir = tmp_path / "run"
    shutil.copytree(source, run_dir)
    (run_dir / "run.json").write_text(damage)
    with pytest.raises(RuntimeError, match=message + r".*(restore it|start a new run)"):
        run_curriculum(read_settings(cfg), run_dir)
    assert final_info(run_dir / "stages" / "1-a" / "final") is not None, "the finals are kept"


@pytest.mark.run
def test_a_resume_with_another_config_names_the_keys_that_differ(kept_run, tmp_path, make_cfg):
    source, _ = kept_run
    run_dir = tmp_path / "run"
    shutil.copytree(source, run_dir)
    (run_dir / "error.txt").write_text("the failed attempt's error\n")
    other = make_cfg(*KEPT, "grpo.learning_rate=0.5", "seed=7", "cpu_threads=2")  # threads: free
    # a config error (one line), refused before the lock holder removes anything: the failed attempt's record stays
    with pytest.raises(ConfigError, match=r"differs .* in grpo.learning_rate, seed; resume with the values"):
        run_curriculum(read_settings(other), run_dir)
    assert (run_dir / "error.txt").read_text() == "the failed attempt's error\n"
