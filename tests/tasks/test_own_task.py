"""A task of one's own, by import path, as the docs show it: docs/tasks.md's own code block, run through
`python -m train` with a ladder over its levels, validated per level, reported and tracked in wandb tables,
and cold-started on its reference responses, without any change to the project."""

from __future__ import annotations

import doctest
import importlib
import json

import pytest

from core.rundir.files import read_jsonl
from eval.report import write_report
from tests.conftest import ROOT, compose_cfg, run_cli
from train.run.runner import run_curriculum
from train.settings import read_settings

LEVELS = ["2digits", "3digits", "4digits"]
COMMAND = ["task=custom", "task._target_=my_task.AdditionTask", "+curriculum=ladder"]


def readme_task() -> str:
    """The code block of docs/tasks.md's "Your own task" section, as a reader copies it."""
    section = (ROOT / "docs" / "tasks.md").read_text().split("\n## Your own task\n")[1].split("\n## ")[0]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_readme_task_is_small_and_its_reward_examples_hold(tmp_path, monkeypatch):
    code = readme_task()
    assert len(code.splitlines()) < 80
    (tmp_path / "my_task.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("my_task")
    assert doctest.testmod(module).failed == 0
    assert module.AdditionTask().levels == tuple(LEVELS)


@pytest.mark.run
def test_the_readme_task_runs_a_ladder_validated_reported_and_tracked(tmp_path, cache_dir):
    (tmp_path / "my_task.py").write_text(readme_task())
    run_dir = tmp_path / "run"
    done = run_cli("train", *COMMAND, "experiment=smoke", "logger=wandb", f"paths.cache_dir={cache_dir}",
                   f"hydra.run.dir={run_dir}", env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    # the ladder: a stage a level, easiest first, each named by its level
    stages = json.loads((run_dir / "run.json").read_text())["stages"]
    assert [(s["name"], s["levels"], s["status"]) for s in stages] == [(lv, {lv: 1.0}, "done") for lv in LEVELS]
    # validation rows per level (smoke's [2, 3]: its first two), with every task's columns and none of K&K's
    rows = read_jsonl(run_dir / "validation.jsonl")
    assert {r["level"] for r in rows} == {"2digits", "3digits"} and {r["stage"] for r in rows} == {0, 1, 2, 3}
    assert all("accuracy" in r and not {"ppl", "lenient_accuracy", "reasoning_agrees_rate"} & set(r) for r in rows)
    # its own rewards, by their names, at its default weights (and smoke's probe reward)
    step = next(r for r in read_jsonl(run_dir / "metrics.jsonl") if r.get("kind") == "step")
    assert {k.split("/")[1] for k in step if k.startswith("rewards/") and k.endswith("/mean")} == {
        "correct", "tagged", "low_tokens"}  # the keys of its default_weights, which TRL logs them by
    # its report speaks of sums and finds its own format reward (no note that it is missing); nothing of K&K's
    report = (write_report(run_dir) / "report.md").read_text()
    assert "| after stage | 2digits | 3digits |" in report and "sum `2digits-test-" in report
    assert "no rewards/" not in report and "puzzle" not in report and "person" not in report
    # wandb's sample tables: every task's columns (the answer against the reference), none of K&K's
    tables = run_dir / "wandb" / "latest-run" / "files" / "media" / "table" / "val"
    table = json.loads(next(tables.glob("2digits/samples_*.table.json")).read_text())
    assert {"id", "correct", "format_ok", "answer", "reference", "completion"} <= set(table["columns"])
    assert "reasoning_agrees" not in table["columns"]


@pytest.mark.run
def test_the_readme_task_cold_starts_on_its_reference_responses(tmp_path, cache_dir, monkeypatch):
    (tmp_path / "my_task.py").write_text(readme_task())
    monkeypatch.syspath_prepend(str(tmp_path))
    stages = ("[{name: cold, kind: sft, level: 2digits, steps: 2, pool: 8},"
              " {name: rl, level: 2digits, steps: 1, pool: 8}]")
    cfg = compose_cfg(cache_dir, *COMMAND, "experiment=smoke", f"curriculum.stages={stages}", output_dir=tmp_path)
    run_curriculum(read_settings(cfg), tmp_path / "run")
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert [(s["kind"], s["status"], s["steps_done"]) for s in manifest["stages"]] == [("sft", "done", 2),
                                                                                      ("grpo", "done", 1)]
