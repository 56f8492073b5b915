"""A checkpoint folder whose config.json names another architecture than its weights is refused before it loads:
transformers (and vLLM) would build the named model and fill every weight the files lack at random, and the
validation of that random model ended rc 0 with its rows written."""

from __future__ import annotations

import json
import shutil

import pytest

from core.checks import ConfigError
from core.models import load_for_inference, resolve_model
from core.weight_check import check_weights_match
from tests.conftest import run_cli

# BERT's config over the tiny Qwen2's weights: none of the BertLMHeadModel's weights is in the files
BERT = {"model_type": "bert", "architectures": ["BertLMHeadModel"], "is_decoder": True, "hidden_size": 64,
        "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 128, "vocab_size": 512}


@pytest.fixture
def tiny(make_cfg, tmp_path):
    """A copy of the tiny model's checkpoint folder, to edit."""
    folder = tmp_path / "tiny"
    shutil.copytree(resolve_model(make_cfg("model=tiny").model, tmp_path / "cache"), folder)
    return folder


def _edit_config(folder, **fields) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **fields}))


def test_the_tiny_models_own_folder_passes(tiny):
    check_weights_match(tiny)


def test_another_architectures_config_is_refused_naming_the_folder_and_the_counts(tiny):
    (tiny / "config.json").write_text(json.dumps(BERT))
    with pytest.raises(ConfigError, match=rf"^model={tiny}: its weights are not those of the BertLMHeadModel its "
                                          r"config.json builds: \d+ of \d+ weights missing, 0 of another shape, \d+ "
                                          r"unexpected"):
        check_weights_match(tiny)


def test_a_config_of_other_sizes_is_refused_as_weights_of_another_shape(tiny):
    config = json.loads((tiny / "config.json").read_text())
    _edit_config(tiny, intermediate_size=config["intermediate_size"] * 2)  # the same names, wider MLPs
    with pytest.raises(ConfigError, match=r"weights missing, [1-9]\d* of another shape"):
        check_weights_match(tiny)


def test_the_hf_loader_refuses_weights_it_would_initialise(tiny):
    (tiny / "config.json").write_text(json.dumps(BERT))
    with pytest.raises(RuntimeError, match=rf"^{tiny}: \d+ weights of the BertLMHeadModel"):
        load_for_inference(tiny, "cpu")


@pytest.mark.run
def test_python_m_eval_refuses_it_in_one_line_writing_no_rows(tiny, tmp_path):
    (tiny / "config.json").write_text(json.dumps(BERT))
    done = run_cli("eval", f"model={tiny}", "experiment=smoke", "model.chat=false", f"hydra.run.dir={tmp_path / 'out'}",
                   timeout=300)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith(f"config error: model={tiny}: its weights are not those "
                                                           "of the BertLMHeadModel"), done.stderr[-2000:]
    assert not (tmp_path / "out" / "validation.jsonl").exists(), "no rows"
