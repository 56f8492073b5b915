"""Tasks other than K&K through `python -m train`: the GSM8K ladder and a reasoning-gym stage, offline, on the
tiny model, end to end (plan, pools, the task's rewards in TRL, validation per level, run.json, the report)."""

from __future__ import annotations

import json
import re

import pytest

from core.checks import ConfigError
from core.rundir.files import read_jsonl
from curriculum.plan import build_plan
from curriculum.tasks.gsm8k import GSM8KTask
from eval.report import write_report
from tests.conftest import run_cli
from train.settings import check_config

GSM_LEVELS = ["2steps", "3steps", "4steps", "5steps", "6+steps"]
SMOKE_LEVELS = GSM_LEVELS[:2]  # experiment=smoke's eval.subsets [2, 3]: the task's first two levels


@pytest.mark.run
def test_the_gsm8k_ladder_smoke_runs_offline_with_a_validation_row_per_level_and_a_report(tmp_path, cache_dir):
    run_dir = tmp_path / "run"
    done = run_cli("train", "+curriculum=gsm8k_ladder", "model=tiny", "experiment=smoke",
                   f"paths.cache_dir={cache_dir}", f"hydra.run.dir={run_dir}")
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads((run_dir / "run.json").read_text())
    # one stage a level, easiest first, each trained on its own level only (smoke's pool cap: 16)
    assert [(s["name"], s["levels"], s["pool"]) for s in manifest["stages"]] == [
        (level, {level: 1.0}, 16) for level in GSM_LEVELS]
    assert list(manifest["stages"][-1]["final_metrics"]) == SMOKE_LEVELS
    rows = read_jsonl(run_dir / "validation.jsonl")
    # smoke's two subsets at the baseline and the end; in between a stage's own level and the next among them,
    # else both (near: 3steps' stage is near 3steps only, 4steps' and 5steps' near neither)
    by_stage = {k: [r["level"] for r in rows if r["stage"] == k] for k in range(6)}
    assert by_stage == {**dict.fromkeys(range(6), SMOKE_LEVELS), 2: ["3steps"]}
    # every task's columns, and none of K&K's: no people count, no person accuracy, no reasoning or lenient rates
    assert all(r["n"] == 4 and not {"ppl", "person_accuracy", "lenient_accuracy", "reasoning_agrees_rate"} & set(r)
               for r in rows)
    # TRL ran the recipe's five rewards (and smoke's probe reward), by their keys
    steps = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r.get("kind") == "step"]
    names = {k.split("/")[1] for k in steps[0] if k.startswith("rewards/") and k.endswith("/mean")}
    assert names == {"correctness", "integer", "strict_format", "soft_format", "xml_count", "low_tokens"}
    # the graded completions name the reference answer of the shipped sample's test record they were asked
    samples = read_jsonl(run_dir / "samples" / "0-baseline" / "3steps.jsonl")
    references = {r.id: r.columns["answer"] for r in GSM8KTask(source="sample").records("3steps", "test")}
    assert len(samples) == 4 and all(s["reference"] == references[s["id"]] for s in samples)
    report = (write_report(run_dir) / "report.md").read_text()
    assert "| after stage | 2steps | 3steps |" in report
    # K&K's people, roles and their chance are not GSM8K's: no chance lines, no reasoning or lenient sections
    assert "(distinct problems): 2steps 4" in report and "chance for n people" not in report
    assert "Reasoning that agrees" not in report and "lenient accuracy" not in report
    # ... nor K&K's words: its puzzles, renaming, people not in the puzzle; the format drawn is GSM8K's own reward
    # (the report's own words: a GSM8K question or completion quoted in a fenced block may say "people")
    words = re.sub(r"^```.*?^```$", "", report, flags=re.MULTILINE | re.DOTALL)
    assert "```" in report and "```" not in words
    assert not [word for word in ("puzzle", "renaming", "person", "people") if word in words]
    assert "problem `gsm8k-test-" in report and "no rewards/" not in report
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
     r"task is gsm8k; choose a reward of gsm8k's: reward=gsm8k_stack \| gsm8k_stack_gist \| gsm8k_stack_verbatim"),
    # a level GSM8K does not have
    (["+curriculum=gsm8k_ladder", "eval.subsets=[7]"], "eval.subsets: 7 is not a level of task gsm8k"),
    # the whole split is a training stage's level only where the task can draw it (K&K cannot)
    (["+curriculum=kk_ladder", "curriculum.stages=[{name: a, level: all, steps: 1, pool: 8}]"],
     r"curriculum.stages\[0\].level: 'all' is not a number of people"),
    # ... and no held-out pool is the whole split's own: a promotion there would check nothing
    (["+curriculum=gsm8k_grpo", "curriculum.stages=[{name: a, level: all, steps: 4, pool: 8, promote: {accuracy: 1}}]"],
     r"curriculum.stages\[0\].promote: a stage on level all \(the whole split\) has no held-out pool"),
    # a supervised stage needs the task's reference responses: reasoning-gym's entries have none
    (["+curriculum=reasoning_gym", "task.dataset=knights_knaves",
      "curriculum.stages=[{name: a, kind: sft, level: all, steps: 1, pool: 8}]"],
     r"curriculum.stages\[0\].kind: sft trains on reference responses, and task reasoning_gym gives none"),
    # the ladder is a stage per level, named by it: a name of its own would name them all alike
    (["+curriculum=ladder", "task=gsm8k", "curriculum.stages=[{name: x, level: each, steps: 1, pool: 8}]"],
     r"curriculum.stages\[0\].name: a `level: each` stage is one stage per level"),
    # the task's own weights asked of a built-in task, which has none: its reward files are named
    (["+curriculum=gsm8k_grpo", "reward=task"],
     r"reward.weights: none given, and task gsm8k declares no default_weights; choose a reward of gsm8k's: "
     r"reward=gsm8k_stack \| gsm8k_stack_gist \| gsm8k_stack_verbatim"),
])
def test_a_task_and_its_config_must_fit(make_cfg, overrides, message):
    if "+curriculum=reasoning_gym" in overrides:
        pytest.importorskip("reasoning_gym", reason="reasoning-gym is an optional extra: pip install -e '.[rgym]'")
    cfg = make_cfg(*overrides)
    with pytest.raises(ConfigError, match=message):
        check_config(cfg, build_plan(cfg))


@pytest.mark.run
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
        "answer", "low_tokens"}
    samples = read_jsonl(run_dir / "samples" / "1-all" / "level3.jsonl")
    assert len(samples) == 4 and all(s["reference"] and s["id"].startswith("level3-test-") for s in samples)
