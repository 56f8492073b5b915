"""`python -m eval model=<a run's final>` as a user runs it: the run's own eval settings (the command line
still wins), its size and folder said first, each subset written as it finishes, one line on Ctrl-C; its wandb run
and its folder's report."""

from __future__ import annotations

import json
import re

import pytest

from eval.report.cli import main as report_main
from tests.conftest import run_cli
from tests.runs.test_console import interrupt_when

# every test here runs the app: training, or `python -m train`/`eval` as a process
pytestmark = pytest.mark.run


def rows_of(out_dir) -> list[dict]:
    return [json.loads(line) for line in (out_dir / "validation.jsonl").read_text().splitlines()]


def final_of(run_dir) -> str:
    return str(run_dir / json.loads((run_dir / "run.json").read_text())["stages"][1]["checkpoint"])


def test_a_runs_final_is_validated_with_the_runs_eval_settings_and_says_its_size_first(smoke_ladder, tmp_path):
    # no experiment=smoke here: the defaults (6 subsets x 100 puzzles x 4096 tokens) are not what the run used
    run_dir, _ = smoke_ladder
    out = tmp_path / "eval"
    done = run_cli("eval", f"model={final_of(run_dir)}", f"hydra.run.dir={out}", merged=True)
    assert done.returncode == 0, done.stdout[-3000:]
    first = done.stdout.index(f"validating {final_of(run_dir)} as task kk: 2 subsets (2ppl 4, 3ppl 4 puzzles), 8 "
                              f"completions of <= 16 tokens (greedy; at most 128 tokens); writing to {out}")
    assert first < done.stdout.index("2ppl validated: 4 completions in ")
    assert [(r["ppl"], r["n"]) for r in rows_of(out)] == [(2, 4), (3, 4)]
    # and what the run validated after that stage, row for row (same pools, prompt, grader, tokens)
    stage = [r for r in rows_of(run_dir) if r["stage"] == 2]
    assert [r["accuracy"] for r in rows_of(out) if r["ppl"] == 3] == [r["accuracy"] for r in stage if r["ppl"] == 3]


def test_the_command_line_wins_over_the_runs_settings(smoke_ladder, tmp_path):
    run_dir, _ = smoke_ladder
    out = tmp_path / "eval"
    done = run_cli("eval", f"model={final_of(run_dir)}", "eval.subsets=[3]", "eval.n=2", f"hydra.run.dir={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert [(r["ppl"], r["n"]) for r in rows_of(out)] == [(3, 2)]
    assert "of <= 16 tokens" in done.stdout  # eval.max_new_tokens still the run's


def test_ctrl_c_keeps_the_finished_subsets_and_says_so_in_one_line(smoke_ladder, tmp_path):
    run_dir, _ = smoke_ladder
    out = tmp_path / "eval"
    done = interrupt_when(["eval", f"model={final_of(run_dir)}", "eval.subsets=[2,3,4,5,6,7]", "eval.n=40",
                           "eval.max_new_tokens=64", f"hydra.run.dir={out}"], ready="2ppl validated")
    assert done.returncode == 130, done.stdout[-2000:]
    kept = [f"{r['ppl']}ppl" for r in rows_of(out)]
    assert kept[0] == "2ppl" and len(kept) < 6
    assert done.stdout.strip().splitlines()[-1] == (
        f"interrupted: kept {', '.join(kept)} in {out / 'validation.jsonl'} (graded completions in {out / 'samples'})")
    assert "Traceback" not in done.stdout


def test_a_validation_reaches_wandb_in_its_runs_group_and_its_folder_has_a_report(smoke_ladder, tmp_path):
    run_dir, _ = smoke_ladder
    out = tmp_path / "eval"
    done = run_cli("eval", f"model={final_of(run_dir)}", "logger=wandb", f"hydra.run.dir={out}",
                   env={"WANDB_MODE": "offline"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith(f"its report: python -m eval.report {out}")
    # one offline wandb run, of job type eval, in the group of the run whose final it validated, each accuracy with
    # its interval bounds, each subset's graded completions as a table with the puzzle, the reference and the answer
    record = next(out.glob("wandb/offline-run-*/run-*.wandb")).read_bytes()
    assert f"{run_dir.parent.name}/{run_dir.name}".encode() in record and b"eval" in record
    assert b"val/2ppl/accuracy_low" in record and b"val/3ppl/accuracy_high" in record
    table = json.loads(next(out.glob("wandb/latest-run/files/media/table/val/2ppl/*.table.json")).read_text())
    assert {"question", "answer", "reference", "completion"} <= set(table["columns"])
    # the folder's report: the model, a row per subset with intervals, the samples with their puzzle
    markdown = (report_main([str(out)]) / "report.md").read_text()
    assert markdown.startswith(f"# Validation report: {final_of(run_dir)}")
    rows = [line for line in markdown.split("## Validation per subset")[1].splitlines() if line.startswith("| ")]
    assert [row.split("|")[1].strip() for row in rows[1:]] == ["2ppl", "3ppl"]
    assert all(re.search(r"\d\.\d{3} \[\d\.\d\d, \d\.\d\d\] n=4", row) for row in rows[1:])
    assert "```folded the puzzle" in markdown and "](accuracy.png)" in markdown
