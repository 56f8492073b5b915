"""Bad input: each gets an error naming the key, file or line, before anything is written or loaded."""

from __future__ import annotations

import json
import os
import re

import pytest

from core.checks import ConfigError
from curriculum.tasks.kk import generate
from curriculum.tasks.kk.screen import ungradable
from curriculum.tasks.kk.sources import RecordError
from eval.report import latest_output
from tests.conftest import ROOT, run_cli
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
    (["limits.max_steps=-1"], None, ConfigError, r"^limits.max_steps: -1 is not a whole number > 0 \(null: no cap\)"),
    # 0 was ignored silently
    (["limits.max_steps=0"], None, ConfigError, r"^limits.max_steps: 0 is not a whole number > 0 \(null: no cap\)"),
    # 0 was ignored silently
    (["limits.max_pool=0"], None, ConfigError, r"^limits.max_pool: 0 is not a whole number > 0 \(null: no cap\)"),
    # a pool of -5 was recorded
    (["limits.max_pool=-5"], None, ConfigError, r"^limits.max_pool: -5 is not a whole number > 0 \(null: no cap\)"),
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
    (["model=tiny", "eval.n=0"], "config error: eval.n: 0 is not a whole number > 0 (puzzles asked per subset)"),
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
    (failed / "error.txt").write_text("ConfigError: limits.max_steps: -1 is not a whole number > 0 (null: no cap)")
    assert latest_output(tmp_path) == good


def _kk_test_file(root, edit):
    """A local K&K source whose 2-person test file is 8 generated records with `edit` applied (the train file as
    generated); the test file's path."""
    for split, offset in (("train", 0), ("test", 1)):
        records = generate(2, 8, seed=offset)
        _write(root / split / "people2_num8.jsonl", edit(records) if split == "test" else records)
    return root / "test" / "people2_num8.jsonl"


def _repeated_index_at_line_4(records):
    records[3] = {**records[3], "index": records[1]["index"]}
    return records


def _knight_named(records, which):
    from tests.tasks.test_record_screen import renamed

    return [renamed(r, r["names"][1], "Knight") if i in which else r for i, r in enumerate(records)]


EVAL = ["experiment=smoke", "eval.subsets=[2]", "eval.n=4"]
CONTRACT = "tests.tasks.test_task_contract"


def _custom(name: str) -> list[str]:
    return ["task=custom", f"task._target_={CONTRACT}.{name}"]


# (how the test file is edited, or a user's task; what `python -m eval` refuses, or None: it validates on 4 records)
EVAL_RECORDS = [
    # the control: records as generated are validated on
    (lambda r: r, None),
    # one record K&K cannot grade right is dropped by name, the pool still full: validated on the other 4
    (lambda r: _knight_named(r, {0}), None),
    # two records with one id: samples could not say which was meant
    (_repeated_index_at_line_4, (RecordError, r"^{path}:4: id 2ppl-\d+ \(index \d+\) repeats the record at {path}:2")),
    # a file of nothing the grader can grade right: every answer would count wrong without a word
    (lambda r: _knight_named(r, set(range(8))), (RecordError, r"^{path}: every one of its 8 records is dropped")),
    # a user's task whose records are dicts: was an AttributeError in the pools
    (_custom("DictRecords"), (ConfigError, rf"^task: {CONTRACT}.DictRecords.records\('2terms', 'test', n=1, "
                                           r"seed=1234\)\[0\] is a dict, not a TaskRecord")),
    # a grader that returns None: was an AttributeError after the model had generated every completion
    (_custom("NoneGrade"), (ConfigError, rf"^task: {CONTRACT}.NoneGrade.grade\('', <2terms-test-0 columns>\) "
                                         r"returned None")),
]


@pytest.mark.parametrize(("data", "refused"), EVAL_RECORDS,
                         ids=["as-generated", "one-ungradable", "repeated-id", "all-ungradable", "dict-records",
                              "none-grade"])
def test_python_m_evals_records_are_checked_as_a_runs_are(tmp_path, make_cfg, data, refused):
    from curriculum.tasks import build_task
    from eval.settings import validation_pools, validation_settings

    if callable(data):
        path = _kk_test_file(tmp_path / "data", data)
        data = ["data=local", f"data.path={tmp_path / 'data'}"]
    else:
        path = None
    cfg = make_cfg(*EVAL, *data)
    settings = validation_settings(cfg.eval, cfg.prompt, cfg.model, build_task(cfg.task, fmt=str(cfg.prompt.fmt)))
    if refused is None:
        pools = validation_pools(settings, int(cfg.seed))
        assert [len(pool) for pool in pools.values()] == [4]
        assert all(ungradable(r.source) is None for r in pools["2ppl"]), "a dropped record is never validated on"
        return
    error, message = refused
    with pytest.raises(error, match=message.format(path=re.escape(str(path)))):
        validation_pools(settings, int(cfg.seed))


@pytest.mark.parametrize(("data", "line"), [
    (_repeated_index_at_line_4, r"data error: {path}:4: id 2ppl-\d+ \(index \d+\) repeats the record at {path}:2; "),
    (_custom("DictRecords"), rf"config error: task: {CONTRACT}.DictRecords.records\('2terms', 'test', n=1, "),
], ids=["repeated-id", "dict-records"])
def test_python_m_eval_refuses_bad_records_in_one_line_before_any_model_loads(tmp_path, data, line):
    path = None
    if callable(data):
        path = _kk_test_file(tmp_path / "data", data)
        data = ["data=local", f"data.path={tmp_path / 'data'}"]
    out = tmp_path / "out"
    done = run_cli("eval", "model=tiny", *EVAL, *data, f"paths.cache_dir={tmp_path / 'cache'}",
                   f"hydra.run.dir={out}", env={"PYTHONPATH": str(ROOT)}, timeout=300)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and re.match(line.format(path=re.escape(str(path))), lines[0]), done.stderr[-2000:]
    assert "validating" not in done.stdout, "refused before it says its size"
    assert not (tmp_path / "cache").exists(), "no model built or loaded"
    assert not (out / "validation.jsonl").exists()
