"""Tasks other than K&K through `python -m train`: the GSM8K ladder and a reasoning-gym stage, offline, on the
tiny model, end to end (plan, pools, the task's rewards in TRL, validation per level, run.json, the report)."""

from __future__ import annotations

import json

import pytest

from core.checks import ConfigError
from core.jsonl import read_jsonl
from curriculum.plan import build_plan
from curriculum.tasks.gsm8k import GSM8KTask
from eval.report import write_report
from tests.conftest import run_cli
from train.config_check import check_config

GSM_LEVELS = ["2steps", "3steps", "4steps", "5steps", "6+steps"]


def test_the_gsm8k_ladder_smoke_runs_offline_with_a_validation_row_per_level_and_a_report(tmp_path, cache_dir):
    run_dir = tmp_path / "run"
    done = run_cli("train", "+curriculum=gsm8k_ladder", "model=tiny", "experiment=smoke",
                   f"paths.cache_dir={cache_dir}", f"hydra.run.dir={run_dir}")
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads((run_dir / "run.json").read_text())
    # one stage a level, easiest first, each trained on its own level only (smoke's pool cap: 16)
    assert [(s["name"], s["levels"], s["pool"]) for s in manifest["stages"]] == [
        (level, {level: 1.0}, 16) for level in GSM_LEVELS]
    assert list(manifest["stages"][-1]["final_metrics"]) == GSM_LEVELS
    rows = read_jsonl(run_dir / "validation.jsonl")
    # the baseline and the last stage on every level; in between each stage's own level and the next (near)
    by_stage = {k: [r["level"] for r in rows if r["stage"] == k] for k in range(6)}
    assert by_stage[0] == by_stage[5] == GSM_LEVELS
    assert by_stage[1] == ["2steps", "3steps"] and by_stage[4] == ["5steps", "6+steps"]
    assert all(r["n"] == 4 and "ppl" not in r and r["person_accuracy"] is None for r in rows)  # no people here
    # TRL ran the recipe's five rewards (and smoke's probe reward), by their names
    steps = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r.get("kind") == "step"]
    names = {k.split("/")[1] for k in steps[0] if k.startswith("rewards/") and k.endswith("/mean")}
    assert names == {"correctness_reward", "integer_reward", "strict_format_reward", "soft_format_reward",
                     "xml_count_reward", "low_tokens"}
    # the graded completions name the reference answer of the shipped sample's test record they were asked
    samples = read_jsonl(run_dir / "samples" / "0-baseline" / "6+steps.jsonl")
    references = {r.id: r.columns["answer"] for r in GSM8KTask(source="sample").records("6+steps", "test")}
    assert len(samples) == 4 and all(s["reference"] == references[s["id"]] for s in samples)
    report = (write_report(run_dir) / "report.md").read_text()
    assert "| after stage | 2steps | 3steps | 4steps | 5steps | 6+steps |" in report
    # K&K's people, roles and their chance are not GSM8K's: no chance lines, no reasoning or lenient sections
    assert "(distinct problems): 2steps 4" in report and "chance for n people" not in report
    assert "Reasoning that agrees" not in report and "lenient accuracy" not in report
    # `python -m eval` on the run's final validates it with the run's task, prompt and pools: the same rows
    evaluated = run_cli("eval", f"model={run_dir / 'stages' / '5-6+steps' / 'final'}", f"paths.cache_dir={cache_dir}",
                        f"hydra.run.dir={tmp_path / 'eval'}")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    again = read_jsonl(tmp_path / "eval" / "validation.jsonl")
    last = [r for r in rows if r["stage"] == 5]
    assert [(r["level"], r["accuracy"], r["mean_tokens"]) for r in again] == [
        (r["level"], r["accuracy"], r["mean_tokens"]) for r in last]


@pytest.mark.parametrize(("overrides", "message"), [
    # K&K's grader reads K&K's formats: another task's prompt on K&K is refused before anything loads
    (["+curriculum=kk_ladder", "prompt=gsm8k_reasoning"], "prompt.fmt: reasoning_answer is not a K&K answer format"),
    # K&K's weights name K&K's components: on GSM8K they would reward nothing GSM8K grades
    (["+curriculum=gsm8k_ladder", "reward=default"], "reward.task: these weights are kk's components, but the "
                                                     "task is gsm8k"),
    # a level GSM8K does not have
    (["+curriculum=gsm8k_ladder", "eval.subsets=[7]"], "eval.subsets: 7 is not a level of task gsm8k"),
    # the whole split is a training stage's level only where the task can draw it (K&K cannot)
    (["+curriculum=kk_ladder", "curriculum.stages=[{name: a, level: all, steps: 1, pool: 8}]"],
     r"curriculum.stages\[0\].level: 'all' is not a number of people"),
])
def test_a_task_and_its_config_must_fit(make_cfg, overrides, message):
    cfg = make_cfg(*overrides)
    with pytest.raises(ConfigError, match=message):
        check_config(cfg, build_plan(cfg))


def test_a_reasoning_gym_stage_runs_over_every_level_with_its_own_score(tmp_path, cache_dir):
    pytest.importorskip("reasoning_gym", reason="reasoning-gym is an optional extra: pip install -e '.[rgym]'")
    run_dir = tmp_path / "run"
    done = run_cli("train", "+curriculum=reasoning_gym", "task.dataset=knights_knaves", "experiment=smoke",
                   f"paths.cache_dir={cache_dir}", f"hydra.run.dir={run_dir}")
    assert done.returncode == 0, done.stderr[-3000:]
    (stage,) = json.loads((run_dir / "run.json").read_text())["stages"]
    assert (stage["name"], stage["levels"], stage["status"]) == ("all", {"all": 1.0}, "done")
    levels = ["level0", "level1", "level2", "level3"]  # knights_knaves' reasoning-gym curriculum: 2..5 people
    rows = read_jsonl(run_dir / "validation.jsonl")
    assert [(r["stage"], r["level"]) for r in rows] == [(k, level) for k in (0, 1) for level in levels]
    # the reward TRL ran is the dataset's score_answer (format is weighted 0, so left out), plus smoke's probe
    steps = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r.get("kind") == "step"]
    assert {k.split("/")[1] for k in steps[0] if k.startswith("rewards/") and k.endswith("/mean")} == {
        "answer_reward", "low_tokens"}
    samples = read_jsonl(run_dir / "samples" / "1-all" / "level3.jsonl")
    assert len(samples) == 4 and all(s["reference"] and s["id"].startswith("level3-test-") for s in samples)
