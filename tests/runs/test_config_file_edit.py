"""A run's config.yaml is the record of what it trains on: run.json holds the file's hash, and a resume refuses an
edited file in one line naming it and the first changed key, leaving the run as it was (docs/runs.md)."""

from __future__ import annotations

import json
import time

import pytest
from omegaconf import OmegaConf

from conf.schema import RESUME_FREE_KEYS
from core.checks import ConfigError
from core.parse_limits import MAX_ALIASES, MAX_YAML_NODES
from core.rundir.manifest import CONFIG_FILE_HASH, Manifest, check_same_config, config_file_hash
from curriculum.plan import build_plan
from tests.conftest import run_cli
from tests.runs.test_received_folders import alias_bomb


def _opened(make_cfg, run_dir):
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke")
    resolved, plan = OmegaConf.to_container(cfg, resolve=True), build_plan(cfg)
    Manifest.open(run_dir, resolved, [stage.planned_record() for stage in plan], free_keys=RESUME_FREE_KEYS)
    return resolved, [stage.name for stage in plan]


def test_run_json_records_the_hash_of_the_config_file_it_wrote(make_cfg, tmp_path):
    _opened(make_cfg, tmp_path)
    recorded = json.loads((tmp_path / "run.json").read_text())[CONFIG_FILE_HASH]
    assert recorded == config_file_hash((tmp_path / "config.yaml").read_bytes())


def set_key(text: str, key: str, value) -> str:
    """config.yaml's text with `key` set to `value`, as an edit by hand (or with OmegaConf) leaves it."""
    config = OmegaConf.create(text)
    OmegaConf.update(config, key, value)
    return OmegaConf.to_yaml(config)


# (how config.yaml is edited, what the refusal names)
EDITS = [
    # a training value changed by hand: unchecked, accepted, the file left saying 0.5 while the run trains on its own
    (lambda text: set_key(text, "grpo.learning_rate", 0.5), "first changed key grpo.learning_rate: 0.5 in the file"),
    # only a comment added: no key differs, yet the file is not the one the run wrote
    (lambda text: "# tuned by hand\n" + text, "not the file the run wrote"),
    # a key a resume may change (the rollouts' groups): the file still no longer says what the run started with
    (lambda text: set_key(text, "rollouts.groups", 7), "not the file the run wrote"),
    # no longer YAML at all: still named, not a parser's traceback
    (lambda text: text + "\n: [unclosed", "not the file the run wrote"),
    # a YAML scalar, not a config's keys: named, not a key called ""
    (lambda text: "just text\n", "not the file the run wrote"),
    # an alias bomb (9**9 values expanded): OmegaConf took ~40 s for 6**5 of them; refused by the limit instead
    (lambda text: text + alias_bomb(9, 9), f"more than {MAX_YAML_NODES} YAML values with its aliases expanded"),
    # aliases past the count a config holds, each small: OmegaConf would read them and name a key
    (lambda text: text + "z: &z x\nzz: [" + ", ".join(["*z"] * (MAX_ALIASES + 1)) + "]\n",
     f"not the file the run wrote; {{file}}: more than {MAX_ALIASES} YAML aliases"),
]


@pytest.mark.parametrize(("edit", "named"), EDITS, ids=["training-key", "comment", "resume-free-key", "not-yaml",
                                                        "scalar", "alias-bomb", "many-aliases"])
def test_a_resume_refuses_an_edited_config_file_naming_it(make_cfg, tmp_path, edit, named):
    resolved, planned = _opened(make_cfg, tmp_path)
    config_file = tmp_path / "config.yaml"
    edited = edit(config_file.read_text())
    assert edited != config_file.read_text(), "the edit applies to this config"
    config_file.write_text(edited)
    with pytest.raises(ConfigError) as refused:
        check_same_config(tmp_path, resolved, planned, RESUME_FREE_KEYS)
    line = str(refused.value)
    assert "\n" not in line and str(config_file) in line and named.format(file=config_file) in line, line
    assert config_file.read_text() == edited, "the edit is kept"


def test_a_resume_with_another_config_names_a_config_file_beyond_a_limit_in_a_second(make_cfg, tmp_path):
    """The keys that differ are read from config.yaml: a bomb sent in it is refused by the limit, not expanded."""
    resolved, planned = _opened(make_cfg, tmp_path)
    config_file = tmp_path / "config.yaml"
    config_file.write_text(config_file.read_text() + alias_bomb(9, 9))
    started = time.monotonic()
    with pytest.raises(ConfigError) as refused:
        check_same_config(tmp_path, {**resolved, "seed": resolved["seed"] + 1}, planned, RESUME_FREE_KEYS)
    assert time.monotonic() - started < 10, "refused as the file is read, not after expanding it"
    assert str(refused.value).startswith(
        f"resume={tmp_path}: the config differs from the one this run was started with (hash ")
    assert f"in keys not read ({config_file}: more than {MAX_YAML_NODES} YAML values with its aliases expanded; " \
           "not read)" in str(refused.value)


def test_an_untouched_config_file_resumes_and_a_deleted_one_is_written_again(make_cfg, tmp_path):
    resolved, planned = _opened(make_cfg, tmp_path)
    check_same_config(tmp_path, resolved, planned, RESUME_FREE_KEYS)  # as written: no refusal
    (tmp_path / "config.yaml").unlink()
    cfg = make_cfg("+curriculum=kk_ladder", "experiment=smoke")
    Manifest.open(tmp_path, resolved, [stage.planned_record() for stage in build_plan(cfg)],
                  free_keys=RESUME_FREE_KEYS)
    assert (tmp_path / "config.yaml").is_file()
    check_same_config(tmp_path, resolved, planned, RESUME_FREE_KEYS)  # its new hash is the one recorded


def test_a_run_json_without_the_hash_is_not_refused(make_cfg, tmp_path):
    resolved, planned = _opened(make_cfg, tmp_path)
    manifest = json.loads((tmp_path / "run.json").read_text())
    del manifest[CONFIG_FILE_HASH]  # a run written before run.json recorded the file
    (tmp_path / "run.json").write_text(json.dumps(manifest))
    (tmp_path / "config.yaml").write_text("# edited\n" + (tmp_path / "config.yaml").read_text())
    check_same_config(tmp_path, resolved, planned, RESUME_FREE_KEYS)


@pytest.mark.run
def test_python_m_train_resume_refuses_an_edited_config_file_in_one_line(tmp_path, cache_dir):
    run_dir = tmp_path / "run"
    common = ["+curriculum=kk_ladder", "experiment=smoke", "curriculum.stages=[{name: a, ppl: 2, steps: 1, pool: 8}]",
              f"paths.cache_dir={cache_dir}"]
    done = run_cli("train", *common, f"hydra.run.dir={run_dir}")
    assert done.returncode == 0, done.stderr[-3000:]
    config_file = run_dir / "config.yaml"
    trained_on = OmegaConf.load(config_file).grpo.learning_rate
    config_file.write_text(set_key(config_file.read_text(), "grpo.learning_rate", 0.5))
    before = {p: p.read_bytes() for p in (config_file, run_dir / "run.json")}
    resumed = run_cli("train", *common, f"resume={run_dir}")
    assert resumed.returncode != 0
    assert resumed.stderr.strip().splitlines() == [
        f"config error: resume={run_dir}: {config_file} was edited after the run wrote it (first changed key "
        f"grpo.learning_rate: 0.5 in the file, the run's {trained_on!r}); "
        "the run trains on the values it started with, not "
        "the file's: put the file back as it was, or start a new run with the edited config"]
    assert {p: p.read_bytes() for p in before} == before, "nothing written"
