"""The run-directory contract (core/rundir/): status lifecycle, JSONL reading, paths, objective."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.rundir.files import RUN_JSON, read_jsonl, run_of_final, scan_jsonl
from core.rundir.manifest import Manifest
from core.rundir.records import Status, objective, stage_records


@pytest.mark.parametrize(("old", "new", "allowed"), [
    ("pending", "running", True),  # a stage starts training
    ("pending", "trained", True),  # a final published before a kill is adopted without training
    ("running", "running", True),  # a resume trains a stage a kill interrupted
    ("running", "trained", True),  # training ended and the final is published
    ("trained", "done", True),  # validated: the next stage may start from its final
    ("trained", "running", True),  # a resume finds the final gone and trains again
    ("failed", "running", True),  # a resume retries a failed stage
    ("done", "pending", True),  # on_damaged_checkpoint=retrain sends a done stage back
    ("pending", "done", False),  # nothing was trained or validated
    ("running", "done", False),  # validation needs a published final first
    ("done", "running", False),  # a done stage is never trained over (a later stage started from it)
    ("done", "failed", False),  # a failure elsewhere does not undo a validated stage
])
def test_stage_status_transitions(tmp_path, old, new, allowed):
    manifest = Manifest(tmp_path / RUN_JSON, {"config_hash": "x", "status": "running",
                                              "stages": [{"index": 1, "name": "a", "status": old}]})
    if allowed:
        manifest.update_stage(1, status=new)
        assert manifest.record(1).status == Status(new)
        assert json.loads((tmp_path / RUN_JSON).read_text())["stages"][0]["status"] == new
    else:
        with pytest.raises(ValueError, match=f"stage a: status {old} -> {new} is not allowed"):
            manifest.update_stage(1, status=new)
        assert manifest.record(1).status == old
        assert not (tmp_path / RUN_JSON).exists()


def _manifest(tmp_path: Path, status: str) -> Manifest:
    manifest = Manifest(tmp_path / RUN_JSON, {"config_hash": "x", "status": "running", "baseline": None,
                                              "stages": [{"index": 1, "name": "a", "status": status}]})
    manifest.save()
    return manifest


def test_the_manifest_refuses_a_status_the_lifecycle_forbids_and_keeps_run_json(tmp_path):
    manifest = _manifest(tmp_path, "pending")
    before = (tmp_path / RUN_JSON).read_text()
    with pytest.raises(ValueError, match="pending -> done"):
        manifest.update_stage(1, status="done", final_metrics={"2ppl": {"accuracy": 1.0}})
    assert (tmp_path / RUN_JSON).read_text() == before
    with pytest.raises(ValueError, match="run status"):
        manifest.update(status="trained")  # a stage status, not a run's


def test_statuses_are_written_as_plain_strings_and_read_back_typed(tmp_path):
    manifest = _manifest(tmp_path, "pending")
    manifest.update_stage(1, status=Status.RUNNING, steps_done=2)
    written = json.loads((tmp_path / RUN_JSON).read_text())
    assert written["stages"][0]["status"] == "running"
    record = stage_records(written)[0]
    assert (record.status, record.steps_done, record.done) == ("running", 2, False)
    assert manifest.record(1) == record


@pytest.mark.parametrize(("text", "rows", "damaged"), [
    ('{"a": 1}\n{"a": 2}\n', [{"a": 1}, {"a": 2}], []),  # an intact file
    ('{"a": 1}\n{"a": 2', [{"a": 1}], [2]),  # a kill mid-write tore the last row
    ('{"a": 1}\n[2]\n\n', [{"a": 1}], [2]),  # a JSON line that is not a row, then blank lines
    ("", [], []),  # created, nothing written yet
])
def test_reading_a_jsonl_drops_a_torn_last_row_and_repair_cuts_it_off(tmp_path, text, rows, damaged):
    path = tmp_path / "metrics.jsonl"
    path.write_text(text)
    assert (scan_jsonl(path).rows, scan_jsonl(path).damaged) == (rows, damaged)
    assert read_jsonl(path, repair=True) == rows
    assert scan_jsonl(path).damaged == [], "repair leaves only whole rows"
    assert read_jsonl(path) == rows


def test_damage_before_the_last_row_is_an_error_for_the_owner_and_a_count_for_a_reader(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"a": 1}\n{"a": \n{"a": 3}\n')
    with pytest.raises(ValueError, match="metrics.jsonl:2: not valid JSON"):
        read_jsonl(path)
    assert scan_jsonl(path).rows == [{"a": 1}, {"a": 3}] and scan_jsonl(path).damaged == [2]
    assert scan_jsonl(tmp_path / "missing.jsonl").rows == []  # a run that has not written it yet


@pytest.mark.parametrize(("name", "accuracy", "expected"), [
    ("mean_final_accuracy", {"2ppl": 0.5, "3ppl": 0.25}, 0.375),  # the default: every validated subset counts
    ("final_accuracy_3ppl", {"2ppl": 0.5, "3ppl": 0.25}, 0.25),  # one subset's
    ("final_accuracy_4ppl", {"2ppl": 0.5}, None),  # a subset that was not validated
    ("mean_final_accuracy", {}, None),  # nothing validated yet (a job in progress)
    ("best_accuracy", {2: 0.5}, None),  # not an objective
])
def test_the_sweep_objective(name, accuracy, expected):
    assert objective(name, accuracy) == expected


@pytest.mark.parametrize(("checkpoint", "run"), [
    ("outputs/runs/x/stages/2-3ppl/final", "outputs/runs/x"),  # a stage's final: its run holds config.yaml
    ("outputs/runs/x/stages/2-3ppl/trainer", None),  # a trainer folder is no final
    ("models/qwen/final", None),  # a folder named final outside a run
    ("final", None),  # too short to sit in a run
])
def test_the_run_of_a_final(checkpoint, run):
    found = run_of_final(Path(checkpoint))
    assert (found.as_posix() if found else None) == run
