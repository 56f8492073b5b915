"""`python -m eval model=<a run's final>` as a user runs it: the run's own eval settings (the command line
still wins), its size and folder said first, each subset written as it finishes, one line on Ctrl-C."""

from __future__ import annotations

import json

from tests.conftest import run_cli
from tests.test_console import interrupt_when


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
