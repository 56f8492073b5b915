"""Each key's help, range and resume flag are declared on its schema field (conf/schema.py), and what reads them
(the range check, the resume hash, `python -m conf.keys`) takes them from there."""

from __future__ import annotations

import pytest

from conf.keys import groups, key_lines, main
from conf.ranges import check_field_ranges
from conf.schema import RESUME_FREE_KEYS, schema_fields
from core.checks import ConfigError
from core.rundir.manifest import config_hash


@pytest.mark.parametrize("group", sorted(groups()))
def test_every_key_has_one_line_of_help(group):
    for dotted, item, _ in schema_fields(groups()[group]):
        help_text = item.metadata.get("help")
        assert help_text and "\n" not in help_text, f"{group}.{dotted}"


def test_the_listing_shows_type_default_range_and_help(capsys):
    lines = dict(line.split("  ", 1) for line in key_lines("eval"))
    assert lines["eval.n"] == "int  default (yaml)  range > 0  puzzles asked per subset"
    assert lines["eval.vllm_gpu_memory_utilization"].startswith("float  default (yaml)  range (0, 1]  the share")
    assert lines["eval.subsets_after_stage"].startswith("all | near  default (yaml)  all (every subset")
    assert main(["launch"]) == 0
    assert "launch.processes  int  default 1  range > 0  processes a job starts" in capsys.readouterr().out
    assert main(["limits"]) == 0
    assert "limits.max_steps  int | None  default null  range > 0  at most" in capsys.readouterr().out
    assert main(["nope"]) == 2 and "groups: root, model" in capsys.readouterr().err


@pytest.mark.parametrize(("config", "refusal"), [
    ({"eval": {"n": 0}}, "eval.n: 0 is not a whole number > 0 (puzzles asked per subset)"),
    ({"eval": {"vllm_gpu_memory_utilization": 1.5}}, "eval.vllm_gpu_memory_utilization: 1.5 is not a number in (0, 1]"),
    ({"eval": {"temperature": -0.5}}, "eval.temperature: -0.5 is not a number >= 0 (0 = greedy)"),
    ({"model": {"tiny": {"seed": -1}}}, "model.tiny.seed: -1 is not a seed"),
    ({"curriculum": {"stages": [{"pool": 1}]}, "seed": 2.5}, "seed: 2.5 is not a seed"),
])
def test_a_declared_range_refuses_naming_key_and_value(config, refusal):
    with pytest.raises(ConfigError) as err:
        check_field_ranges(config)
    assert str(err.value).startswith(refusal), str(err.value)


def test_values_in_range_and_nulls_pass():
    check_field_ranges({"seed": 0, "eval": {"n": 1, "every": 0, "vllm_gpu_memory_utilization": 1}, "model": {}})


def test_the_resume_hash_leaves_out_the_keys_marked_on_their_fields():
    # the marked keys, the batch size among them (it changes no result), and none that changes training
    assert {"hydra", "eval.batch_size", "reward.timeout_s", "logger", "finals"} <= set(RESUME_FREE_KEYS)
    assert not {"seed", "eval.n", "grpo", "reward", "reward.weights", "curriculum"} & set(RESUME_FREE_KEYS)
    base = {"seed": 1, "eval": {"n": 4, "batch_size": 8}, "logger": {"backend": "none"}}
    same = config_hash(base, RESUME_FREE_KEYS)
    assert same == config_hash({**base, "eval": {"n": 4, "batch_size": 2}, "logger": {}}, RESUME_FREE_KEYS)
    assert same != config_hash({**base, "eval": {"n": 5, "batch_size": 8}}, RESUME_FREE_KEYS)
