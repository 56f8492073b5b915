"""Damage drills: a run folder whose files changed after the run wrote them (a flipped bit, a truncated
copy, a link, an edit), then resumed. Nothing damaged is trained from, used as a reference, or written
through; what the run falls back to gives the weights an uninterrupted run gives."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from core.rundir.manifest import Manifest
from tests.conftest import compose_cfg
from train.run.runner import run_curriculum
from train.settings import read_settings

# every test here runs the app: training, or `python -m train`/`eval` as a process
pytestmark = pytest.mark.run

TWO_STAGES = ["+curriculum=kk_ladder", "experiment=smoke", "keep_trainer_checkpoints=true", "cpu_threads=1",
              "grpo.save_total_limit=null", "limits.max_steps=3",
              "curriculum.stages=[{name: a, ppl: 2, steps: 3, pool: 8}, {name: b, ppl: 3, steps: 3, pool: 8}]"]


@pytest.fixture(scope="module")
def whole_run(tmp_path_factory, cache_dir):
    """An uninterrupted two-stage run keeping every trainer checkpoint (1, 2, 3 of each stage)."""
    run_dir = tmp_path_factory.mktemp("whole") / "run"
    cfg = compose_cfg(cache_dir, *TWO_STAGES)
    run_curriculum(read_settings(cfg), run_dir)
    return run_dir, cfg


def _copy(source: Path, tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    shutil.copytree(source, run_dir)
    return run_dir


def _edit_manifest(run_dir: Path, edit) -> None:
    manifest = json.loads((run_dir / "run.json").read_text())
    edit(manifest)
    (run_dir / "run.json").write_text(json.dumps(manifest))


def _weights(path: Path) -> bytes:
    return (path / "model.safetensors").read_bytes()


def _damage(path: Path, how: str) -> None:
    """Flip the lowest bit of the last float32 (a change no loader notices), or cut the file short."""
    data = bytearray(path.read_bytes())
    if how == "flip":
        data[-4] ^= 1
    else:
        del data[len(data) // 2:]
    path.write_bytes(bytes(data))


def _killed_in_stage_b(run_dir: Path) -> None:
    """As a kill during stage b's third step leaves it: checkpoints 1 and 2 on disk, no final, status running."""
    shutil.rmtree(run_dir / "stages" / "2-b" / "final")
    shutil.rmtree(run_dir / "stages" / "2-b" / "trainer" / "checkpoint-3")

    def running(manifest):
        manifest["stages"][1].update(status="running", checkpoint=None, final_metrics={})
        manifest["status"] = "failed"
    _edit_manifest(run_dir, running)


@pytest.mark.parametrize("how", ["flip", "truncate"])  # silent damage; a raw SafetensorError on every resume
def test_a_damaged_trainer_checkpoint_is_passed_over_and_the_final_is_an_uninterrupted_runs(whole_run, tmp_path,
                                                                                            how):
    source, cfg = whole_run
    run_dir = _copy(source, tmp_path)
    _killed_in_stage_b(run_dir)
    _damage(run_dir / "stages" / "2-b" / "trainer" / "checkpoint-2" / "model.safetensors", how)
    run_curriculum(read_settings(cfg), run_dir)
    stage = json.loads((run_dir / "run.json").read_text())["stages"][1]
    assert stage["status"] == "done"
    assert stage["resumed_from"].endswith("checkpoint-1"), "the previous intact checkpoint"
    assert [s["checkpoint"] for s in stage["skipped_checkpoints"]] == ["checkpoint-2"]
    assert "model.safetensors" in stage["skipped_checkpoints"][0]["problem"]
    assert _weights(run_dir / "stages" / "2-b" / "final") == _weights(source / "stages" / "2-b" / "final")


def test_every_checkpoint_damaged_falls_back_to_the_stage_start(whole_run, tmp_path):
    source, cfg = whole_run
    run_dir = _copy(source, tmp_path)
    _killed_in_stage_b(run_dir)
    for step in (1, 2):
        _damage(run_dir / "stages" / "2-b" / "trainer" / f"checkpoint-{step}" / "optimizer.pt", "flip")
    run_curriculum(read_settings(cfg), run_dir)
    stage = json.loads((run_dir / "run.json").read_text())["stages"][1]
    assert stage["resumed_from"] is None and len(stage["skipped_checkpoints"]) == 2, "trained from its start"
    assert _weights(run_dir / "stages" / "2-b" / "final") == _weights(source / "stages" / "2-b" / "final")


def _final_needed_and_damaged(source: Path, tmp_path: Path, how: str) -> Path:
    """Stage a done, its final damaged; stage b still to train from it."""
    run_dir = _copy(source, tmp_path)
    shutil.rmtree(run_dir / "stages" / "2-b")
    _edit_manifest(run_dir, lambda m: m["stages"][1].update(status="pending", checkpoint=None, steps_done=0))
    _damage(run_dir / "stages" / "1-a" / "final" / "model.safetensors", how)
    return run_dir


@pytest.mark.parametrize("how", ["flip", "truncate"])
def test_a_damaged_final_is_refused_by_name(whole_run, tmp_path, how):
    source, cfg = whole_run
    run_dir = _final_needed_and_damaged(source, tmp_path, how)
    damaged = _weights(run_dir / "stages" / "1-a" / "final")
    with pytest.raises(RuntimeError, match=r"stage a: its final checkpoint stages/1-a/final is missing or damaged "
                                           r"\(model.safetensors: .*\); restore it, or set on_damaged_checkpoint"):
        run_curriculum(read_settings(cfg), run_dir)
    assert not (run_dir / "stages" / "2-b" / "final").exists(), "stage b never trained from it"
    assert _weights(run_dir / "stages" / "1-a" / "final") == damaged, "left as it was, for whoever restores it"


@pytest.mark.parametrize("how", ["flip", "truncate"])
def test_a_damaged_final_is_retrained_to_an_uninterrupted_runs_weights(whole_run, tmp_path, cache_dir, how):
    source, _ = whole_run
    run_dir = _final_needed_and_damaged(source, tmp_path, how)
    run_curriculum(read_settings(compose_cfg(cache_dir, *TWO_STAGES, "on_damaged_checkpoint=retrain")), run_dir)
    stages = json.loads((run_dir / "run.json").read_text())["stages"]
    assert [s["status"] for s in stages] == ["done", "done"]
    for name in ("1-a", "2-b"):  # a republished from its checkpoint at the budget, b trained from it
        assert _weights(run_dir / "stages" / name / "final") == _weights(source / "stages" / name / "final")


@pytest.mark.parametrize("link, refusal", [
    (Path.symlink_to, r"metrics.jsonl: a symbolic link out of the run directory"),
    # the same file under a second name: only symbolic links were checked, and the resume wrote through it
    (lambda path, outside: path.hardlink_to(outside), r"metrics.jsonl: a hard link \(2 names for one file"),
])
def test_metrics_replaced_by_a_link_out_of_the_run_is_refused_and_its_target_untouched(whole_run, tmp_path, link,
                                                                                       refusal):
    source, cfg = whole_run
    run_dir = _copy(source, tmp_path)
    _killed_in_stage_b(run_dir)
    outside = tmp_path / "someone-elses.jsonl"
    outside.write_bytes((run_dir / "metrics.jsonl").read_bytes() + b'{"torn": ')  # a torn tail: truncated on open
    before = outside.read_bytes()
    (run_dir / "metrics.jsonl").unlink()
    link(run_dir / "metrics.jsonl", outside)
    with pytest.raises(RuntimeError, match=refusal):
        run_curriculum(read_settings(cfg), run_dir)
    assert outside.read_bytes() == before, "neither truncated nor appended to"


def test_a_checkpoint_path_in_run_json_outside_the_run_is_not_followed(whole_run, tmp_path):
    source, cfg = whole_run
    run_dir = _copy(source, tmp_path)
    _killed_in_stage_b(run_dir)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(run_dir / "stages" / "1-a" / "final", elsewhere)
    _edit_manifest(run_dir, lambda m: m["stages"][0].update(checkpoint=str(elsewhere)))
    with pytest.raises(RuntimeError, match=rf"run.json: stage 1 \(a\): checkpoint '{elsewhere}' is not "
                                           r"stages/1-a/final, where a run publishes"):
        run_curriculum(read_settings(cfg), run_dir)


@pytest.mark.parametrize("edit, message", [
    # a status no run writes: named with the file and the stage, not "'finished' is not a valid Status"
    (lambda m: m["stages"][0].update(status="finished"), r"stage 1 \(a\): status 'finished' is not one of pending"),
    (lambda m: m.update(status="finished"), r"status 'finished' is not one of running, done, failed"),
    (lambda m: m["stages"][1].update(steps_done="3"), r"stage 2 \(b\): steps_done '3' is not a whole number"),
    (lambda m: m["stages"].pop(), r"1 stage entries for a plan of 2"),
    (lambda m: m["stages"][0].update(name="z"), r"stage 1 \(a\): named 'z', but the plan's stage there is 'a'"),
])
def test_a_manifest_entry_no_run_writes_is_named_with_its_file_and_stage(whole_run, tmp_path, edit, message):
    source, cfg = whole_run
    run_dir = _copy(source, tmp_path)
    _edit_manifest(run_dir, edit)
    with pytest.raises(RuntimeError, match=rf"{run_dir / 'run.json'}: {message}.*restore it, or start a new run"):
        run_curriculum(read_settings(cfg), run_dir)


def _swap_finals(run_dir: Path) -> None:
    """Stage a's and b's finals exchanged, each intact with its own stage.json (a copy that mixed up folders)."""
    a, b = (run_dir / "stages" / name / "final" for name in ("1-a", "2-b"))
    a.rename(a.with_name("swapping"))
    b.rename(a)
    a.with_name("swapping").rename(b)


def _marker_rewritten(run_dir: Path) -> None:
    """Stage a's stage.json rewritten with its files' digests kept: an edit (or another run's marker) that the
    files alone cannot show."""
    marker = run_dir / "stages" / "1-a" / "final" / "stage.json"
    marker.write_text(json.dumps(json.loads(marker.read_text())))


def test_swapped_finals_are_refused_on_resume_before_anything_trains_from_them(whole_run, tmp_path):
    source, cfg = whole_run
    run_dir = _copy(source, tmp_path)
    _swap_finals(run_dir)
    swapped = {name: _weights(run_dir / "stages" / name / "final") for name in ("1-a", "2-b")}
    with pytest.raises(RuntimeError, match=r"stage b: its final checkpoint stages/2-b/final is missing or damaged "
                                           r"\(its stage.json names stage 'a', not 'b': another stage's final is in "
                                           r"its place"):
        run_curriculum(read_settings(cfg), run_dir)
    assert {name: _weights(run_dir / "stages" / name / "final") for name in swapped} == swapped, "left as they were"


def test_swapped_finals_are_set_aside_and_retrained_to_an_uninterrupted_runs_weights(whole_run, tmp_path, cache_dir):
    source, _ = whole_run
    run_dir = _copy(source, tmp_path)
    _swap_finals(run_dir)
    run_curriculum(read_settings(compose_cfg(cache_dir, *TWO_STAGES, "on_damaged_checkpoint=retrain")), run_dir)
    assert [s["status"] for s in json.loads((run_dir / "run.json").read_text())["stages"]] == ["done", "done"]
    for name, other in (("1-a", "2-b"), ("2-b", "1-a")):
        assert _weights(run_dir / "stages" / name / "final") == _weights(source / "stages" / name / "final")
        # what was refused is kept beside it, not deleted: it is the other stage's intact final
        assert _weights(run_dir / "stages" / name / "final.refused") == _weights(source / "stages" / other / "final")


def test_a_marker_that_is_not_the_one_run_json_recorded_is_refused(whole_run, tmp_path):
    source, cfg = whole_run
    run_dir = _copy(source, tmp_path)
    shutil.rmtree(run_dir / "stages" / "2-b")  # stage b still to train from a's final
    _edit_manifest(run_dir, lambda m: m["stages"][1].update(status="pending", checkpoint=None, steps_done=0))
    _marker_rewritten(run_dir)
    with pytest.raises(RuntimeError, match=r"stage a: .* \(its stage.json \(sha256 \w{12}\) is not the one run.json "
                                           r"recorded for stage a \(sha256 \w{12}\)"):
        run_curriculum(read_settings(cfg), run_dir)


@pytest.mark.parametrize("change, named", [
    (lambda run: _damage(run / "stages" / "1-a" / "final" / "config.json", "truncate"), r"config.json: \d+ bytes"),
    (_swap_finals, r"its stage.json names stage 'b', not 'a'"),  # swapped while stage b... would start from it
    (_marker_rewritten, r"its stage.json \(sha256 \w{12}\) is not the one run.json recorded for stage a"),
])
def test_a_final_changed_between_stages_is_not_trained_from(whole_run, tmp_path, change, named):
    """No resume at all: the previous stage's final is checked against run.json when the next stage starts."""
    from train.run.runner import intact

    source, _ = whole_run
    run_dir = _copy(source, tmp_path)
    final = run_dir / "stages" / "1-a" / "final"
    manifest = Manifest(run_dir / "run.json", json.loads((run_dir / "run.json").read_text()))
    intact(run_dir, manifest, str(final), None)
    change(run_dir)
    with pytest.raises(RuntimeError, match=rf"1-a/final: damaged since it was published \({named}"):
        intact(run_dir, manifest, str(final), None)
