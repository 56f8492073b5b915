"""Config errors: the schema (conf/schema.py) refuses unknown keys and wrong types wherever they are, and
every refusal is one `config error:` line that names the key, before a run folder exists or anything loads."""

from __future__ import annotations

import os

import pytest
from omegaconf import OmegaConf

from conf import CONF_DIR
from conf.choices import PromptFormat
from conf.errors import run_app
from core.checks import ConfigError
from curriculum.tasks.kk.grading.grader import FORMATS
from tests.conftest import compose_cfg, run_cli

# (arguments after `python -m train +curriculum=kk_ladder experiment=smoke`, the one line it must print)
TRAIN_CLI = [
    # a misspelt top-level key added with +: unchecked, accepted, and the whole ladder runs without the cap
    (["+limts.max_steps=1"], "config error: limts: not a config key; did you mean limits?"),
    # a count that is not a number: unchecked, int()'s traceback ("invalid literal for int()")
    (["eval.n=abc"], "config error: eval.n: Value 'abc' of type 'str' could not be converted to Integer"),
    # a seed that is not a number: unchecked, a traceback from the data pools, after the run folder is made
    (["seed=abc"], "config error: seed: Value 'abc' of type 'str' could not be converted to Integer"),
    # a misspelt stage key added with +, inside the list of stages: named with its stage and the real key
    (["+curriculum.stages.0.stpes=3"],
     "config error: curriculum.stages[0].stpes: not a config key; did you mean curriculum.stages[0].steps?"),
    # a resume path that is no run, with an explicit run folder: unchecked, a fresh run starts there without a word
    (["resume={tmp}/no-such-run", "hydra.run.dir={tmp}/out/run"],
     "config error: resume={tmp}/no-such-run: does not exist; a run directory holds run.json"),
    # an id the tiny model never reads, refused after Hydra made the run folder (unchecked: the tiny
    # model trains, exit 0);
    # the folder goes, and so does paths.output_dir/runs, which Hydra made for it
    (["model.id=/some/missing/dir"], "config error: model.id: /some/missing/dir is ignored by model.source=tiny"),
    # a misspelt GRPOConfig field: the suggestion is the real field, not a + that would add the misspelling
    (["grpo.learning_rat=1e-5"], "config error: grpo.learning_rat: not a config key; did you mean grpo.learning_rate?"),
    # with the +: the real field named too, not "not a GRPOConfig field (TRL)" alone
    (["+grpo.learning_rat=1e-5"],
     "config error: grpo.learning_rat: not a GRPOConfig field (TRL); did you mean grpo.learning_rate?"),
]


@pytest.mark.run
@pytest.mark.parametrize(("args", "line"), TRAIN_CLI, ids=[a[0] for a, _ in TRAIN_CLI])
def test_python_m_train_refuses_a_bad_config_in_one_line_before_anything_exists(tmp_path, args, line):
    args = [arg.format(tmp=tmp_path) for arg in args]
    done = run_cli("train", "+curriculum=kk_ladder", "experiment=smoke", f"paths.output_dir={tmp_path / 'out'}",
                   f"paths.cache_dir={tmp_path / 'cache'}", *args, timeout=120)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(line.format(tmp=tmp_path)), done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "out").exists(), "no run folder"
    assert not (tmp_path / "cache").exists(), "no model built or loaded"


@pytest.mark.run
def test_a_missing_optional_extra_is_named_in_one_line_before_any_folder(tmp_path):
    # a reasoning_gym first on the path that fails to import, as it does without the rgym extra: one line,
    # not two tracebacks and a run folder holding only error.txt
    hidden = tmp_path / "site" / "reasoning_gym"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text('raise ImportError("not installed here")\n')
    done = run_cli("train", "+curriculum=reasoning_gym", "task.dataset=knights_knaves", "experiment=smoke",
                   f"paths.output_dir={tmp_path / 'out'}", f"paths.cache_dir={tmp_path / 'cache'}", timeout=120,
                   env={"PYTHONPATH": os.pathsep.join([str(hidden.parent), os.environ["PYTHONPATH"]])})
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "config error: task: task=reasoning_gym needs reasoning-gym, an optional extra that is not importable here "
        "(not installed here): pip install -e '.[rgym]' (or pip install reasoning-gym==0.1.25)"], done.stderr[-2000:]
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


# (arguments after `python -m eval model=tiny experiment=smoke`, the line it must end with)
EVAL_CLI = [
    # the same count: unchecked, int()'s traceback
    (["eval.n=abc"], "config error: eval.n: Value 'abc' of type 'str' could not be converted to Integer"),
    # a misspelt key of a group, added with +: unchecked, ignored
    (["+eval.nn=3"], "config error: eval.nn: not a config key; did you mean eval.n?"),
]


@pytest.mark.run
@pytest.mark.parametrize(("args", "line"), EVAL_CLI, ids=[a[0] for a, _ in EVAL_CLI])
def test_python_m_eval_refuses_a_bad_config_in_one_line(tmp_path, args, line):
    done = run_cli("eval", "model=tiny", "experiment=smoke", f"paths.output_dir={tmp_path / 'out'}",
                   f"paths.cache_dir={tmp_path / 'cache'}", *args, timeout=120)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == line, done.stderr[-2000:]
    assert [row for row in done.stderr.splitlines() if "config error" in row] == [line]
    assert "Traceback" not in done.stdout + done.stderr and "HYDRA_FULL_ERROR" not in done.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


# (overrides, the start of the one line): composed in process as the apps compose, checked as they check
REFUSED = [
    # unknown keys, with or without +, at the top, in a group, in a stage, in a block that may be null
    (["limts.max_steps=1"], "limts: not a config key; did you mean limits?"),
    # inside a list of records OmegaConf names the key from the record: the override says where
    (["+curriculum=kk_ladder", "curriculum.stages=[{name: a, ppl: 2, steps: 1, pool: 8, stpes: 3}]"],
     "stpes: not a config key; did you mean steps? (in curriculum.stages=[{name: a"),
    (["eval.nn=3"], "eval.nn: not a config key; did you mean eval.n?"),
    # a reward's weights are its file's (conf/reward/), over the task's own: no key names a preset
    (["reward.preset=default"], "reward.preset: not a config key"),
    # an open group: the nearest of TRL's GRPOConfig fields (not in conf/grpo/default.yaml), then how to add a key
    (["grpo.steps_per_generatoin=2"], "grpo.steps_per_generatoin: not a config key; did you mean "
     "grpo.steps_per_generation? (to add a key to an open group, write +grpo.steps_per_generatoin=...)"),
    (["+logger.projet=x"], "logger.projet: not a config key; did you mean logger.project?"),
    (["+curriculum=kk_adaptive", "+curriculum.stages.0.promote.acuracy=0.5"],
     "curriculum.stages[0].promote.acuracy: not a config key; did you mean curriculum.stages[0].promote.accuracy?"),
    (["+curriculum=kk_ladder", "+curriculum.guard={zero_std: 0.9, windw: 3}"],
     "curriculum.guard.windw: not a config key; did you mean curriculum.guard.window?"),
    (["model=tiny", "+model.tiny.hiden_size=8"],
     "model.tiny.hiden_size: not a config key; did you mean model.tiny.hidden_size?"),
    # an open group (TRL's fields) takes new keys only with +, and then TRL's dataclass checks them; the nearest
    # field is named first (TRL 1.16 has no max_prompt_length)
    (["grpo.max_prompt_length=512"], "grpo.max_prompt_length: not a config key; did you mean "
     "grpo.max_completion_length? (to add a key to an open group, write +grpo.max_prompt_length=...)"),
    # nothing near: only how to add it
    (["grpo.zzqq=1"], "grpo.zzqq: not a config key; to add a key to an open group, write +grpo.zzqq=..."),
    # wrong types: a bool is not a number, a float is not a count
    (["keep_trainer_checkpoints=maybe"], "keep_trainer_checkpoints: Value 'maybe' is not a valid bool"),
    (["+curriculum=kk_ladder", "curriculum.stages.1.steps=2.5"], "curriculum.stages[1].steps: Value '2.5'"),
    # a name from a fixed set
    (["reference=sft"], "reference: Invalid value 'sft', expected one of [previous_stage, rl_start, base]"),
    (["device=tpu"], "device: Invalid value 'tpu'"),
    (["on_damaged_checkpoint=ignore"],
     "on_damaged_checkpoint: Invalid value 'ignore', expected one of [error, retrain]"),
    (["eval.backend=onnx"], "eval.backend: Invalid value 'onnx', expected one of [auto, hf, vllm]"),
    (["+curriculum=kk_ladder", "curriculum.stages.0.kind=ppo"], "curriculum.stages[0].kind: Invalid value 'ppo'"),
    (["+curriculum=kk_ladder", "curriculum.stages=[{name: a, ppl: 2, steps: 1, pool: 8, guard: {zero_std: 0.9, "
      "action: halt}}]"], "curriculum.stages[0].guard.action: Invalid value 'halt', expected one of [warn, stop]"),
    # a block that is not one
    (["+curriculum=kk_ladder", "+curriculum.guard=0.9"], "curriculum.guard: 0.9 is not a block of length_drop"),
    # a required key left out
    (["+curriculum=kk_ladder", "curriculum.stages=[{name: a, ppl: 2, steps: 1}]"],
     "curriculum.stages[0].pool: missing"),
    (["+curriculum=kk_ladder", "+curriculum.stages.0.promote={every: 2}"],
     "curriculum.stages[0].promote.accuracy: missing"),
    # a key of a curriculum before one is chosen (OmegaConf fails inside itself here)
    (["curriculum.name=x"], "curriculum.name=x: sets a key of a block that is null here; choose a curriculum first"),
    # a group option that does not exist, named with the ones that do
    (["model=qwen9"], "In 'config': Could not find 'model/qwen9'; options: qwen2.5-0.5b-instruct"),
]


@pytest.mark.parametrize(("overrides", "message"), REFUSED, ids=[" ".join(o) for o, _ in REFUSED])
def test_the_schema_refuses_and_names_the_key(cache_dir, overrides, message):
    with pytest.raises(ConfigError) as err:
        compose_cfg(cache_dir, *overrides)
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("overrides", [
    # every curriculum, experiment and preset as the README and docs/ use them
    ["+curriculum=kk_ladder"], ["+curriculum=kk_logicrl"], ["+curriculum=kk_mixed"],
    ["+curriculum=kk_adaptive", "experiment=smoke"], ["+curriculum=kk_r1", "experiment=cpu_demo"],
    ["+curriculum=kk_ladder", "experiment=single_gpu", "gpu.memory_gb=80"],
    ["+curriculum=kk_ladder", "data=local", "data.path=x", "logger=none", "reward=partial", "prompt=answer_only"],
    ["+curriculum=kk_ladder", "model=qwen3-0.6b-base", "reward=tiered", "reward.tiered.scheme=seed_v4_instruct"],
    # blocks that may be null, set from the command line
    ["+curriculum=kk_ladder", "+curriculum.guard={length_drop: 0.3}", "+curriculum.stages.0.promote={accuracy: 0.8}"],
    # open groups take new keys with +
    ["+curriculum=kk_ladder", "+grpo.steps_per_generation=16", "+reward.custom.x={_target_: a.b}", "model.lora={r: 4}"],
])
def test_the_shipped_configs_compose(cache_dir, overrides):
    compose_cfg(cache_dir, *overrides)


def test_the_schemas_prompt_formats_are_the_graders():
    # K&K's grader's formats, and the formats of the GSM8K and reasoning-gym prompts (graded by their tasks)
    others = {OmegaConf.load(CONF_DIR / "prompt" / f"{name}.yaml").fmt
              for name in ("gsm8k_reasoning", "reasoning_gym")}
    assert {fmt.value for fmt in PromptFormat} == set(FORMATS) | others and not others & set(FORMATS)


def test_a_choice_reads_as_its_name(cache_dir):
    cfg = compose_cfg(cache_dir, "+curriculum=kk_ladder")
    assert cfg.reference == "previous_stage" and str(cfg.reference) == "previous_stage"
    assert f"{cfg.eval.backend}" == "auto" and cfg.curriculum.stages[0].kind == "grpo"


def test_run_app_prints_a_config_error_as_one_line_and_lets_a_bug_raise(monkeypatch):
    monkeypatch.setenv("HYDRA_FULL_ERROR", "0")  # restored after the test; run_app sets it to 1

    def bad_config():
        raise ConfigError("eval.n: must be > 0 (got 0)")

    def bug():
        raise KeyError("a real bug")

    with pytest.raises(SystemExit) as stopped:
        run_app(bad_config)
    assert str(stopped.value) == "config error: eval.n: must be > 0 (got 0)"
    with pytest.raises(KeyError, match="a real bug"):  # its traceback is printed whole, not as a config error
        run_app(bug)
