"""Runs side by side: the smoke ladder (reference refreshed each stage) beside a one-stage mix (reference
the base model), both real tiny-model runs, in one report."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from eval.report.cli import main
from tests.conftest import ROOT, compose_cfg
from tests.report.test_report import make_job

# every test here runs the app: training, or `python -m train`/`eval` as a process
pytestmark = pytest.mark.run


@pytest.fixture(scope="module")
def two_runs(smoke_ladder, cache_dir, tmp_path_factory) -> tuple[Path, Path]:
    """(the ladder, the mix): the mix trains once per module, on the same pools and model."""
    from train.run.runner import run_curriculum
    from train.settings import read_settings

    mixed = tmp_path_factory.mktemp("runs") / "mixed"
    cfg = compose_cfg(cache_dir, "+curriculum=kk_mixed", "experiment=smoke", "reference=base")
    run_curriculum(read_settings(cfg), mixed)
    return smoke_ladder[0], mixed


def _table(markdown: str, title: str) -> list[list[str]]:
    section = markdown.split(f"## {title}")[1].split("\n## ")[0]
    return [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines() if line.startswith("| ")]


def test_two_runs_side_by_side(two_runs, tmp_path, capsys):
    ladder, mixed = two_runs
    out = main([str(ladder), str(mixed), "--out", str(tmp_path / "cmp")])
    assert out == tmp_path / "cmp"
    printed = capsys.readouterr().out
    assert "comparison of 2 runs written to:" in printed and str(out / "report.html") in printed
    markdown = (out / "report.md").read_text()
    labels = [ladder.name, mixed.name]
    assert markdown.startswith(f"# Comparison: {labels[0]} vs {labels[1]}")
    # what differs: the curriculum and the reference policy, each run's value side by side
    differs = {row[0]: row[1:] for row in _table(markdown, "What differs between their configs")[1:]}
    assert differs["curriculum.name"] == ["kk_ladder", "kk_mixed"]
    assert differs["reference"] == ["previous_stage", "base"]
    assert not any(key.startswith("paths.") for key in differs)
    # final accuracy: one row a run, every cell with its interval and n
    final = _table(markdown, "Final accuracy per subset (after each run's last validated stage)")
    assert [row[0] for row in final[1:]] == labels
    assert all(re.fullmatch(r"\d\.\d{3} \[\d\.\d\d, \d\.\d\d\] n=4( [▲▼])?", c) for row in final[1:] for c in row[1:])
    # accuracy per stage: the ladder's baseline and 5 stages, then the mix's baseline and 1 stage
    per_stage = _table(markdown, "Accuracy per stage")[1:]
    assert [(row[0], row[1]) for row in per_stage] == [
        *((labels[0], s) for s in ("baseline", "2ppl", "3ppl", "4ppl", "5ppl", "6ppl")),
        (labels[1], "baseline"), (labels[1], "mixed")]
    # how each stage ended, and against which reference: the refresh is visible
    ends = _table(markdown, "How each stage ended")[1:]
    assert [row[8] for row in ends] == ["base model", *["previous stage"] * 4, "base model"]
    assert [row[6] for row in ends] == ["budget"] * 6
    html = (out / "report.html").read_text()
    assert sorted(p.name for p in out.glob("*.png")) == ["compare_curves.png", "compare_final.png"]
    assert len(re.findall(r"src='data:image/png;base64,", html)) == 2


def test_a_comparison_goes_under_the_output_root_unless_told_and_refuses_a_sweep(two_runs, tmp_path, capsys):
    ladder, mixed = two_runs
    out = main([str(ladder), str(mixed), "--outputs", str(tmp_path)])
    assert out.parent == tmp_path / "compare" and (out / "report.md").exists()
    assert str(out / "report.md") in capsys.readouterr().out  # where it wrote, on the console
    assert not (ladder / "report").exists() and not (mixed / "report").exists()  # the compared runs stay as they were
    sweep = tmp_path / "multirun" / "s"
    make_job(sweep, 0, ["seed=1"])
    with pytest.raises(SystemExit, match="a sweep"):
        main([str(ladder), str(sweep), "--out", str(tmp_path / "x")])
    (tmp_path / "notes.md").write_text("mine")  # a file where the folder would go: one line, not FileExistsError
    with pytest.raises(SystemExit, match=r"^--out .*notes.md: a file, not a folder; give a folder for the comparison"):
        main([str(ladder), str(mixed), "--out", str(tmp_path / "notes.md")])
    assert (tmp_path / "notes.md").read_text() == "mine"


def test_a_config_yaml_linked_out_of_a_received_run_is_not_read_into_the_comparison(two_runs, tmp_path):
    ladder, mixed = two_runs
    received = tmp_path / "received"
    shutil.copytree(mixed, received)
    secret = tmp_path / "secrets.yaml"
    secret.write_text((received / "config.yaml").read_text() + "oauth_token: planted-token-123\n")
    (received / "config.yaml").unlink()
    (received / "config.yaml").symlink_to(secret)
    out = main([str(ladder), str(received), "--out", str(tmp_path / "cmp")])
    for page in ("report.md", "report.html"):
        assert "planted-token-123" not in (out / page).read_text(), f"{page} shows a file from outside the run"


def test_make_report_passes_several_runs_through():
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    done = subprocess.run(["make", "-n", "report", "RUN=runs/a runs/b"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and "-m eval.report runs/a runs/b" in done.stdout
