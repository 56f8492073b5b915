"""Bad input: each gets an error naming the key, file or line, before anything is written or loaded."""

from __future__ import annotations

import json
import os

import pytest

from core.checks import ConfigError
from curriculum.tasks.kk import generate
from curriculum.tasks.kk.sources import RecordError
from eval.report import latest_output
from tests.conftest import run_cli
from train.run.runner import run_curriculum
from train.settings import read_settings

ONE_STAGE = ["+curriculum=kk_ladder", "experiment=smoke", "curriculum.stages=[{name: a, ppl: 2, steps: 1, pool: 8}]",
             "eval.subsets=[2]"]


def _write(path, records) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _wrong_solution_at_line_3(records):
    records[2] = {**records[2], "solution": [not s for s in records[2]["solution"]]}
    return records


# (overrides, local files {split: edit of 8 good records} or None for generated data, error, message)
CASES = [
    # -1 is not "no cap": it trained 48 steps a stage
    (["limits.max_steps=-1"], None, ConfigError, r"^limits.max_steps: must be a whole number > 0 \(got -1\)"),
    # 0 was ignored silently
    (["limits.max_steps=0"], None, ConfigError, r"^limits.max_steps: must be a whole number > 0 \(got 0\)"),
    # 0 was ignored silently
    (["limits.max_pool=0"], None, ConfigError, r"^limits.max_pool: must be a whole number > 0 \(got 0\)"),
    # a pool of -5 was recorded
    (["limits.max_pool=-5"], None, ConfigError, r"^limits.max_pool: must be a whole number > 0 \(got -5\)"),
    # 2 people make only 399 puzzles: it crashed later with "Column 'prompt' doesn't exist"
    (["eval.n=500"], None, ConfigError, r"^eval.n: 500 validation puzzles asked at 2ppl, but .* has only 399"),
    # every 2-person puzzle held out leaves no training puzzle: the same crash
    (["eval.n=399"], None, ConfigError, r"^curriculum.stages\[0\] \(a\): no 2ppl training puzzle left: all 399"),
    # an empty training file: the same crash
    ([], {"train": lambda records: []}, RecordError, r"train/people2_num8.jsonl: no records \(the file is empty\)"),
    # an empty test file: "no completions to score" after run.json was written
    ([], {"test": lambda records: []}, RecordError, r"test/people2_num8.jsonl: no records"),
    # a label the statements contradict: trained on without a word
    ([], {"train": _wrong_solution_at_line_3}, RecordError,
     r"train/people2_num8.jsonl:3: field 'solution' is \[\w+, \w+\], but the statements allow \[\w+, \w+\]"),
]


# asking for more 2-person puzzles than exist warns (the generator) before the check names the key
@pytest.mark.run
@pytest.mark.filterwarnings("ignore:only 399 distinct 2-person puzzles:UserWarning")
@pytest.mark.parametrize(("overrides", "files", "error", "message"), CASES)
def test_bad_input_is_named_before_anything_is_written(tmp_path, make_cfg, overrides, files, error, message):
    data = []
    if files is not None:
        for split, offset in (("train", 0), ("test", 1)):
            _write(tmp_path / "data" / split / "people2_num8.jsonl",
                   files.get(split, lambda r: r)(generate(2, 8, seed=offset)))
        data = ["data=local", f"data.path={tmp_path / 'data'}", "eval.n=4"]
    run_dir = tmp_path / "run"
    with pytest.raises(error, match=message):
        run_curriculum(read_settings(make_cfg(*ONE_STAGE, *data, *overrides)), run_dir)
    assert not (run_dir / "run.json").exists() and not (run_dir / "config.yaml").exists()


@pytest.mark.run
@pytest.mark.parametrize(("args", "message"), [
    # "no completions to score", after loading the model
    (["model=tiny", "eval.n=0"], "config error: eval.n: must be > 0 (got 0)"),
    # was looked up on the hub and called a bad hub id
    (["model=outputs/runs/no-such-run/stages/1-2ppl/final"],
     "config error: model=outputs/runs/no-such-run/stages/1-2ppl/final: no such checkpoint folder"),
])
def test_python_m_eval_checks_its_input_first(tmp_path, cache_dir, args, message):
    done = run_cli("eval", *args, "experiment=smoke", f"paths.cache_dir={cache_dir}", f"hydra.run.dir={tmp_path}")
    assert done.returncode != 0
    assert message in done.stderr
    assert not (tmp_path / "validation.jsonl").exists()


def test_a_run_directory_left_by_a_config_error_is_not_the_latest(tmp_path):
    good, failed = tmp_path / "runs" / "good", tmp_path / "runs" / "failed"
    good.mkdir(parents=True)
    (good / "run.json").write_text("{}")
    os.utime(good / "run.json", (1e9, 1e9))
    (failed / ".hydra").mkdir(parents=True)
    (failed / "error.txt").write_text("ConfigError: limits.max_steps: must be a whole number > 0 (got -1)")
    assert latest_output(tmp_path) == good
