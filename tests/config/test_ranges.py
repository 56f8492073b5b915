"""Numbers and names out of range are refused in one line naming the key, before a run folder exists or a model
loads (conf/ranges.py); each was a traceback, a hang or a run that trained on nothing, some after the run started."""

from __future__ import annotations

import os
import re

import pytest
from omegaconf import OmegaConf

from conf.ranges import check_cpu_threads, check_ranges
from core.checks import ConfigError
from curriculum.plan import build_plan
from tests.conftest import run_cli
from train.settings import check_config

SMOKE = ["+curriculum=kk_ladder", "experiment=smoke"]

# (overrides, the start of the refusal)
OUT_OF_RANGE = [
    # beyond numpy's 32-bit seeding: unchecked, numpy's "Seed must be between 0 and 2**32 - 1" traceback 12 s in
    (["seed=18446744073709551616"],
     "seed: 18446744073709551616 is not a seed: seeds are whole numbers in [0, 2**32-1]"),
    (["seed=-1"], "seed: -1 is not a seed"),  # negative: numpy's refusal too
    (["eval.seed=4294967296"], "eval.seed: 4294967296 is not a seed"),  # 2**32: one past the last
    # NaN and inf pass every comparison check (nan < 0 is False): a run that trained on NaN
    (["grpo.learning_rate=nan"], "grpo.learning_rate: nan is not a finite number"),
    (["grpo.learning_rate=inf"], "grpo.learning_rate: inf is not a finite number"),
    (["eval.temperature=-inf"], "eval.temperature: -inf is not a finite number"),
    # a negative clip range: TRL clips the ratio to an empty interval
    (["grpo.epsilon=-0.2"], "grpo.epsilon: -0.2 is negative"),
    (["rollouts.groups=-1"], "rollouts.groups: -1 is not a count of prompt groups >= 0"),
    # 0 is refused by transformers only after the run folder is made; -1 logs nothing the run reads
    (["grpo.logging_steps=0"], "grpo.logging_steps: 0 is not a whole number of steps > 0"),
    (["grpo.logging_steps=-1"], "grpo.logging_steps: -1 is not a whole number of steps > 0"),
    # decided (docs/config.md): 0 keeps no trainer checkpoint, and transformers refuses it after the folder is made
    (["grpo.save_steps=0"], "grpo.save_steps: 0 is not a whole number of steps > 0"),
    (["sft.save_steps=-3"], "sft.save_steps: -3 is not a whole number of steps > 0"),
    # refused only once the run folder was made and left running
    (["cpu_threads=0"], "cpu_threads: must be auto or a whole number > 0 (got 0)"),
    (["cpu_threads=-2"], "cpu_threads: must be auto or a whole number > 0 (got -2)"),
    (["cpu_threads=1.5"], "cpu_threads: must be auto or a whole number > 0 (got 1.5)"),
    # mmap's out-of-memory error
    (["cpu_threads=100000"], "cpu_threads: 100000 threads on a machine of"),
    # "File name too long" once the stage's folder was made, the run started
    ([f"curriculum.stages=[{{name: {'a' * 300}, ppl: 2, steps: 1, pool: 8}}]"],
     "curriculum.stages: stage name 'aaaa"),
]


@pytest.mark.parametrize(("overrides", "refusal"), OUT_OF_RANGE, ids=[o[0][:40] for o, _ in OUT_OF_RANGE])
def test_a_value_out_of_range_is_refused_naming_its_key(make_cfg, overrides, refusal):
    cfg = make_cfg(*SMOKE, *overrides)
    with pytest.raises(ConfigError, match="^" + re.escape(refusal)):
        check_config(cfg, build_plan(cfg))


@pytest.mark.parametrize("overrides", [
    ["seed=0"], ["seed=4294967295"],  # the ends of numpy's range
    ["grpo.epsilon=0"], ["rollouts.groups=0"], ["grpo.logging_steps=1"], ["cpu_threads=auto"],
    ["curriculum.stages=[{name: 6+steps.v2_a-b, ppl: 2, steps: 1, pool: 8}]"],  # GSM8K's level names have a +
])
def test_values_at_the_ends_of_their_ranges_pass(make_cfg, overrides):
    cfg = make_cfg(*SMOKE, *overrides)
    check_config(cfg, build_plan(cfg))


def _stages(*stages: str) -> str:
    return f"curriculum.stages=[{', '.join(stages)}]"


A, B = "{name: a, ppl: 2, steps: 2, pool: 8", "{name: b, ppl: 3, steps: 1, pool: 8"
# A range declared on its schema field (conf/schema.py), each key: (a value just outside it, the start of the
# refusal, a value just inside it). Without the range each was a traceback, a hang or a silent no-op later on.
FIELD_RANGES = [
    # a cap of 0 or -1 read as "no cap": null is that
    ("limits.max_steps=0", "limits.max_steps: 0 is not a whole number > 0 (null: no cap)", "limits.max_steps=1"),
    ("limits.max_sft_steps=0", "limits.max_sft_steps: 0 is not a whole number > 0", "limits.max_sft_steps=1"),
    ("limits.max_pool=0", "limits.max_pool: 0 is not a whole number > 0", "limits.max_pool=1"),
    # a mapping's range is each value's, named by its key
    ("++limits.stage_steps={2ppl: 0}", "limits.stage_steps.2ppl: 0 is not a whole number > 0",
     "++limits.stage_steps={2ppl: 1}"),
    # a job of no process trains nothing
    ("launch.processes=0", "launch.processes: 0 is not a whole number > 0", "launch.processes=1"),
    # no time at all for a reward call: every call would time out
    ("reward.timeout_s=0", "reward.timeout_s: 0.0 is not a number of seconds > 0", "reward.timeout_s=0.001"),
    # no overlong ramp at all
    ("reward.overlong.buffer=0", "reward.overlong.buffer: 0 is not a whole number > 0", "reward.overlong.buffer=1"),
    # a rank of 0 trains nothing
    ("model.lora={r: 0}", "model.lora.r: 0 is not a whole number > 0", "model.lora={r: 1}"),
    # a scale of 0 zeroes the adapters' output
    ("model.lora={r: 4, alpha: 0}", "model.lora.alpha: 0 is not a whole number > 0", "model.lora={r: 4, alpha: 1}"),
    # a dropout of 1 drops every adapter input
    ("model.lora={r: 4, dropout: 1}", "model.lora.dropout: 1 is not a number in [0, 1)",
     "model.lora={r: 4, dropout: 0.99}"),
    # adapters at learning rate 0 never move
    ("model.lora={r: 4, learning_rate: 0}", "model.lora.learning_rate: 0 is not a number > 0",
     "model.lora={r: 4, learning_rate: 1e-9}"),
    # a stage of no step, of an empty pool, or of no pass over it
    (_stages("{name: a, ppl: 2, steps: 0, pool: 8}"), "curriculum.stages[0].steps: 0 is not a whole number > 0",
     _stages("{name: a, ppl: 2, steps: 1, pool: 8}")),
    (_stages("{name: a, ppl: 2, steps: 1, pool: 0}"), "curriculum.stages[0].pool: 0 is not a whole number > 0",
     _stages("{name: a, ppl: 2, steps: 1, pool: 1}")),
    (_stages("{name: a, ppl: 2, epochs: 0, pool: 8}"), "curriculum.stages[0].epochs: 0.0 is not a number > 0",
     _stages("{name: a, ppl: 2, epochs: 0.01, pool: 8}")),
    # replaying the whole pool leaves no room for the stage's own level
    (_stages(A + "}", B + ", replay: 1}"), "curriculum.stages[1].replay: 1.0 is not a share in [0, 1)",
     _stages(A + "}", B + ", replay: 0.99}")),
    # a threshold above 1 is never reached
    (_stages(A + ", promote: {accuracy: 1.01, every: 1}}"), "curriculum.stages[0].promote.accuracy: 1.01 is not a "
     "number in [0, 1]", _stages(A + ", promote: {accuracy: 1, every: 1}}")),
    # a check every 0 steps is no cadence
    (_stages(A + ", promote: {accuracy: 0.5, every: 0}}"), "curriculum.stages[0].promote.every: 0 is not a whole "
     "number > 0", _stages(A + ", promote: {accuracy: 0.5, every: 1}}")),
    # a negative number of steps before the first check
    (_stages(A + ", promote: {accuracy: 0.5, every: 1, min_steps: -1}}"), "curriculum.stages[0].promote.min_steps: "
     "-1 is not a whole number >= 0", _stages(A + ", promote: {accuracy: 0.5, every: 1, min_steps: 0}}")),
    # each guard signal is a share
    (_stages(A + ", guard: {length_drop: 1.01}}"), "curriculum.stages[0].guard.length_drop: 1.01 is not a number in",
     _stages(A + ", guard: {length_drop: 1}}")),
    (_stages(A + ", guard: {zero_std: -0.01}}"), "curriculum.stages[0].guard.zero_std: -0.01 is not a number in",
     _stages(A + ", guard: {zero_std: 0}}")),
    (_stages(A + ", guard: {distinct_below: 1.01}}"), "curriculum.stages[0].guard.distinct_below: 1.01 is not a",
     _stages(A + ", guard: {distinct_below: 1}}")),
    # a window of no logged step measures nothing; the curriculum's guard is the same record
    (_stages(A + ", guard: {zero_std: 0.5, window: 0}}"), "curriculum.stages[0].guard.window: 0 is not a whole "
     "number > 0", _stages(A + ", guard: {zero_std: 0.5, window: 1}}")),
    ("+curriculum.guard={zero_std: 0.5, window: 0}", "curriculum.guard.window: 0 is not a whole number > 0",
     "+curriculum.guard={zero_std: 0.5, window: 1}"),
]


@pytest.mark.parametrize(("outside", "refusal", "inside"), FIELD_RANGES, ids=[o[:40] for o, _, _ in FIELD_RANGES])
def test_a_range_on_a_schema_field_refuses_just_outside_and_passes_just_inside(make_cfg, outside, refusal, inside):
    cfg = make_cfg(*SMOKE, outside)
    with pytest.raises(ConfigError, match="^" + re.escape(refusal)):
        check_config(cfg, build_plan(cfg))
    cfg = make_cfg(*SMOKE, inside)
    check_config(cfg, build_plan(cfg))


@pytest.mark.parametrize(("threads", "cores", "passes"), [
    (8, 2, True),  # 4 per core: still a thread count a run may pin
    (9, 2, False),  # beyond it
    (True, 2, False),  # a bool is no count
])
def test_cpu_threads_are_capped_by_the_machines_cores(threads, cores, passes):
    if passes:
        check_cpu_threads(threads, cores)
    else:
        with pytest.raises(ConfigError, match="^cpu_threads: "):
            check_cpu_threads(threads, cores)


@pytest.mark.parametrize("name", [".hidden", "-a", "a/b", "a b", "x" * 65, "é"])
def test_a_stage_name_that_is_no_folder_name_is_refused(name):
    with pytest.raises(ConfigError, match="^curriculum.stages: stage name "):
        check_ranges(OmegaConf.create({}), [name])


# (override, the one line): OmegaConf's error named no key ("config error: None: ...")
INTERPOLATIONS = [
    ("grpo.learning_rate=${nope}",
     "config error: grpo.learning_rate: ${nope} points at nope, which is not a config key; give "
     "grpo.learning_rate a value, or interpolate a key that exists"),
    ("grpo.learning_rate=${grpo.learning_rate}",
     "config error: grpo.learning_rate: ${grpo.learning_rate} refers back to itself (a recursive interpolation); "
     "give grpo.learning_rate a value"),
]


@pytest.mark.run
@pytest.mark.parametrize(("override", "line"), INTERPOLATIONS, ids=["missing", "recursive"])
def test_a_bad_interpolation_is_one_line_naming_its_key_before_a_run_folder(tmp_path, override, line):
    done = run_cli("train", *SMOKE, f"paths.output_dir={tmp_path / 'out'}", override, timeout=120)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [line], done.stderr[-2000:]
    assert not (tmp_path / "out").exists(), "no run folder"


@pytest.mark.run
def test_python_m_train_refuses_cpu_threads_0_before_a_run_folder(tmp_path):
    done = run_cli("train", *SMOKE, f"paths.output_dir={tmp_path / 'out'}", "cpu_threads=0", timeout=120)
    assert done.stderr.strip().splitlines() == ["config error: cpu_threads: must be auto or a whole number > 0 (got 0)"]
    assert not list((tmp_path / "out").glob("runs/*")), "no run folder (a refused run leaves none)"


@pytest.mark.run
def test_python_m_eval_refuses_a_seed_out_of_range(tmp_path):
    done = run_cli("eval", "model=tiny", "experiment=smoke", f"paths.output_dir={tmp_path / 'out'}", "seed=-5",
                   f"paths.cache_dir={tmp_path / 'cache'}", timeout=120)
    assert done.stderr.strip().splitlines()[-1].startswith("config error: seed: -5 is not a seed"), done.stderr[-2000:]
    assert not (tmp_path / "cache").exists(), "no model built"


def test_the_cap_follows_this_machine():
    check_cpu_threads(os.cpu_count() or 1)  # one per core always passes


def test_a_context_beyond_the_models_positions_is_refused(make_cfg):
    cfg = make_cfg(*SMOKE, "model.context_length=4096")  # the tiny model has 2048 positions
    with pytest.raises(ConfigError, match=r"^model.context_length: 4096 tokens, beyond the 2048 positions the model "
                                          r"has \(max_position_embeddings in its config\); use at most 2048"):
        check_config(cfg, build_plan(cfg))


@pytest.mark.run
def test_a_run_folder_inside_a_stage_final_is_refused_before_it_is_made(tmp_path):
    final = tmp_path / "run" / "stages" / "1-a" / "final"
    final.mkdir(parents=True)
    (final / "stage.json").write_text("{}")
    done = run_cli("eval", "model=tiny", "experiment=smoke", f"hydra.run.dir={final / 'eval'}", timeout=120)
    assert done.stderr.strip().splitlines()[-1] == (
        f"config error: hydra.run.dir: {final / 'eval'} is inside the stage final {final}, which writing there "
        "would change; give a folder outside it (or leave hydra.run.dir out)"), done.stderr[-2000:]
    assert sorted(p.name for p in final.iterdir()) == ["stage.json"], "nothing written into the final"


def test_python_m_eval_warns_of_a_gpu_sized_validation_on_a_cpu(tmp_path):
    from types import SimpleNamespace

    from eval.__main__ import cpu_size_warning

    pools = {"2ppl": [None] * 100, "3ppl": [None] * 100}  # the default subsets' size
    big = SimpleNamespace(samples=1, max_new_tokens=4096)
    small = SimpleNamespace(samples=1, max_new_tokens=64)
    import torch

    if torch.cuda.is_available():
        pytest.skip("a machine with CUDA does not warn")
    assert cpu_size_warning(pools, big, "qwen").startswith("no CUDA GPU: this validation is GPU-sized (model qwen, "
                                                           "up to 819,200 generated tokens)")
    assert cpu_size_warning(pools, small, "qwen") is None, "under an hour at the CPU rate: no warning"
