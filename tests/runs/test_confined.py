"""A run writes only files it created inside its directory, and a report reads a received folder without following
a link out of it (core/rundir/files.py). Each case is a folder as someone could hand it over."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.rundir.files import OutsideRunError, check_links, open_regular, read_inside, write_text_atomic


def outside_file(tmp_path: Path) -> Path:
    target = tmp_path / "elsewhere" / "someone-elses.txt"
    target.parent.mkdir(exist_ok=True)
    target.write_text("not the run's\n")
    return target


def a_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "stages" / "1-a").mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    return run


def metrics_hard_linked(run: Path, outside: Path) -> None:
    (run / "metrics.jsonl").unlink()
    os.link(outside, run / "metrics.jsonl")


def wandb_linked_out(run: Path, outside: Path) -> None:
    (run / "wandb").symlink_to(outside.parent, target_is_directory=True)


def samples_linked_out(run: Path, outside: Path) -> None:
    (run / "samples").symlink_to(outside.parent, target_is_directory=True)


def deep_file_hard_linked(run: Path, outside: Path) -> None:
    os.link(outside, run / "stages" / "1-a" / "notes.txt")


def metrics_linked_out(run: Path, outside: Path) -> None:
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").symlink_to(outside)


@pytest.mark.parametrize("plant, named, why", [
    (metrics_linked_out, "metrics.jsonl: a symbolic link out", "appended to and truncated through the link"),
    (metrics_hard_linked, r"metrics.jsonl: a hard link \(2 names", "one file under two names: writing it writes both"),
    (wandb_linked_out, "wandb: a symbolic link out", "wandb writes every tracking file through its folder"),
    (samples_linked_out, "samples: a symbolic link out", "validation writes every graded completion under it"),
    (deep_file_hard_linked, "1-a/notes.txt: a hard link", "anywhere in the run, not only its top folder"),
])
def test_a_run_folder_with_a_link_out_is_refused_naming_it(tmp_path, plant, named, why):
    run, outside = a_run(tmp_path), outside_file(tmp_path)
    plant(run, outside)
    with pytest.raises(OutsideRunError, match=named):
        check_links(run)
    assert outside.read_text() == "not the run's\n"


def test_links_that_stay_inside_and_wandbs_own_links_are_left_alone(tmp_path):
    run, outside = a_run(tmp_path), outside_file(tmp_path)
    (run / "latest").symlink_to(run / "stages" / "1-a", target_is_directory=True)  # stays inside
    (run / "wandb" / "logs").mkdir(parents=True)
    (run / "wandb" / "logs" / "debug-core.log").symlink_to(outside)  # wandb links its debug log to its cache
    check_links(run)


@pytest.mark.parametrize("flags", [
    os.O_WRONLY | os.O_APPEND | os.O_CREAT,  # how metrics.jsonl is appended to
    os.O_RDWR,  # how a torn tail is cut off (truncate at an offset)
    os.O_WRONLY | os.O_CREAT | os.O_TRUNC,  # how config.yaml, run.owner and a JSON file's temporary are written
])
def test_open_regular_refuses_a_hard_link_before_it_truncates_anything(tmp_path, flags):
    outside = outside_file(tmp_path)
    os.link(outside, tmp_path / "metrics.jsonl")
    with pytest.raises(OutsideRunError, match="a hard link"):
        open_regular(tmp_path / "metrics.jsonl", flags)
    assert outside.read_text() == "not the run's\n", "O_TRUNC would have emptied it on open"


def test_open_regular_truncates_the_runs_own_file(tmp_path):
    own = tmp_path / "config.yaml"
    own.write_text("old, longer text\n")
    with os.fdopen(open_regular(own, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w") as fh:
        fh.write("new\n")
    assert own.read_text() == "new\n"


def test_an_atomic_write_refuses_a_link_planted_at_its_temporary_and_leaves_its_target_alone(tmp_path):
    # a validation's samples file and run.json are written through a temporary beside them: a symbolic link
    # planted at that name would otherwise have the run overwrite a file outside it
    outside = outside_file(tmp_path)
    samples = tmp_path / "2ppl.jsonl"
    (tmp_path / f".2ppl.jsonl.{os.getpid()}.tmp").symlink_to(outside)
    with pytest.raises(OutsideRunError):
        write_text_atomic(samples, '{"id": "1"}\n')
    assert outside.read_text() == "not the run's\n" and not samples.exists()
    (tmp_path / f".2ppl.jsonl.{os.getpid()}.tmp").unlink()
    write_text_atomic(samples, '{"id": "1"}\n')  # the run's own file: written whole
    assert samples.read_text() == '{"id": "1"}\n'


@pytest.mark.parametrize("make, expected", [
    (lambda run, outside: (run / "config.yaml").write_text("seed: 1\n"), b"seed: 1\n"),  # the run's own file
    (lambda run, outside: (run / "config.yaml").symlink_to(outside), None),  # a planted token would be read
    (lambda run, outside: (run / "config.yaml").symlink_to(run / "metrics.jsonl"), b'{"step": 1}\n'),  # inside
    (lambda run, outside: (run / "config.yaml").mkdir(), None),  # not a file
    (lambda run, outside: None, None),  # missing
])
def test_read_inside_reads_no_file_through_a_link_out(tmp_path, make, expected):
    run, outside = a_run(tmp_path), outside_file(tmp_path)
    make(run, outside)
    assert read_inside(run, run / "config.yaml") == expected


def test_read_inside_follows_no_folder_linked_out(tmp_path):
    run, outside = a_run(tmp_path), outside_file(tmp_path)
    (run / ".hydra").symlink_to(outside.parent, target_is_directory=True)
    assert read_inside(run, run / ".hydra" / outside.name) is None
