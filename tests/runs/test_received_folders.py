"""Folders someone sent: a run or a sweep crafted to take the report (or `python -m eval`) down. A YAML alias bomb
or deep nesting is refused in one line naming the file, a job folder that is a link is skipped by name, and a
metric that is no number (inf, NaN, beyond float32) is a gap in its plot."""

from __future__ import annotations

import json
import logging
import math

import pytest

from core.checks import ConfigError
from core.parse_limits import MAX_ALIASES, MAX_DEPTH, MAX_YAML_BYTES, ParseLimitError, parse_json, parse_yaml
from core.weight_check import file_weights
from eval.checkpoint import _has_chat_template
from eval.report import series as rs
from eval.report.cli import main, write_report
from eval.report.sweep import sweep_report
from eval.settings import planned_model_fields
from eval.vllm_engine import checkpoint_tensors
from tests.report.test_report import (
    KK_REPORT,
    done_manifest,
    done_validation,
    make_job,
    stage_entry,
    step_row,
    val_row,
    write_jsonl,
)


def alias_bomb(levels: int, fan: int) -> str:
    """Billion laughs: each anchor a list of `fan` aliases to the one before; `fan ** levels` values expanded."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * fan)}]"]
    lines += [f"l{k}: &l{k} [{', '.join([f'*l{k - 1}'] * fan)}]" for k in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def nested_yaml(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(("text", "refused"), [
    (alias_bomb(8, 9), "more than 100000 YAML values with its aliases expanded"),  # 72 aliases, 9**8 values
    ("a: &a x\nb: [" + ", ".join(["*a"] * (MAX_ALIASES + 1)) + "]\n", f"more than {MAX_ALIASES} YAML aliases"),
    ("a: &a [1, *a]\n", "a value that contains itself"),  # safe_load makes a list that holds itself
    (nested_yaml(MAX_DEPTH + 1), f"YAML nested deeper than {MAX_DEPTH} levels"),  # the composer recurses per level
    (nested_yaml(100_000), f"YAML nested deeper than {MAX_DEPTH} levels"),  # refused before any RecursionError
    # aliases that each stay shallow but nest through each other
    ("a: &a " + nested_yaml(40) + "\nb: &b [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[*a]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n",
     "nested deeper than 64 levels with its aliases expanded"),
    ("x: " + "y" * MAX_YAML_BYTES + "\n", f"over the {MAX_YAML_BYTES} a config holds"),
    # within every limit: what configs hold
    (alias_bomb(2, 9), None),  # 18 aliases, 729 values
    ("a: &a {k: 1}\nb: *a\nc: {<<: *a, j: 2}\n", None),  # an anchor, an alias, a merge key
    (nested_yaml(MAX_DEPTH), None),
])
def test_yaml_beyond_a_limit_is_refused_naming_the_file(text, refused):
    if refused is None:
        parse_yaml(text, "run/config.yaml")
        return
    with pytest.raises(ParseLimitError, match=rf"^run/config.yaml: .*{refused}.*; not read$"):
        parse_yaml(text, "run/config.yaml")


@pytest.mark.parametrize(("text", "refused"), [
    ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), True),
    ('{"a": ' * 100_000 + "1" + "}" * 100_000, True),  # json.loads would raise a bare RecursionError
    ("[" * MAX_DEPTH + "]" * MAX_DEPTH, False),
    ('{"text": "' + "[" * 1000 + '"}', False),  # brackets in a string nest nothing
    ('"\\"[[[[" ' + "[" * 70, True),  # an escaped quote does not end the string; 70 openings after it
])
def test_json_nested_beyond_the_limit_is_refused_naming_the_file(text, refused):
    if not refused:
        parse_json(text, "run/run.json")
        return
    with pytest.raises(ParseLimitError, match=rf"^run/run.json: JSON nested deeper than {MAX_DEPTH} levels"):
        parse_json(text, "run/run.json")


def crafted_run(folder, *, config: str = "objective: mean_final_accuracy\n", manifest: str | None = None,
                steps: list[dict] | None = None):
    """A small run folder as a report reads it: one stage of three steps, validated before and after."""
    folder.mkdir(parents=True)
    stages = [stage_entry(1, 2, "done", 0, 3)]
    (folder / "run.json").write_text(manifest or json.dumps({"status": "done", "stages": stages,
                                                                         "task_report": KK_REPORT}))
    (folder / "config.yaml").write_text(config)
    write_jsonl(folder / "metrics.jsonl", steps or [step_row(1, 2, k, k) for k in (1, 2, 3)])
    write_jsonl(folder / "validation.jsonl", [val_row(0, "baseline", 0, 2, 0.1, 300.0),
                                              val_row(1, "2ppl", 3, 2, 0.6, 250.0)])
    return folder


def test_a_comparison_with_an_alias_bomb_config_stays_small_and_names_it(tmp_path, caplog):
    bomb = crafted_run(tmp_path / "sent", config="seed: 1\n" + alias_bomb(9, 9))  # 9**9 values expanded
    mine = crafted_run(tmp_path / "mine", config="seed: 2\n")
    with caplog.at_level(logging.WARNING, logger="core.rundir.files"):
        out = main([str(mine), str(bomb), "--out", str(tmp_path / "cmp")])
    assert (out / "report.md").stat().st_size < 200_000, "the aliases were never expanded into the report"
    assert any(f"{bomb / 'config.yaml'}: more than" in r.getMessage() for r in caplog.records)


def test_python_m_eval_refuses_a_run_config_beyond_a_limit_in_one_line(tmp_path):
    from eval.__main__ import run_config

    run = crafted_run(tmp_path / "sent", config=alias_bomb(9, 9))
    with pytest.raises(ConfigError, match=rf"^{run / 'config.yaml'}: more than 100000 YAML values"):
        run_config(run)


def test_a_run_json_nested_too_deep_is_a_note_and_a_report(tmp_path, caplog):
    run = crafted_run(tmp_path / "sent", manifest='{"stages": ' + "[" * 5000 + "]" * 5000 + "}")
    with caplog.at_level(logging.WARNING, logger="core.rundir.files"):
        out = write_report(run)
    assert "run.json is missing or unreadable" in (out / "report.md").read_text()
    assert any(f"{run / 'run.json'}: JSON nested deeper" in r.getMessage() for r in caplog.records)


def test_a_metrics_line_nested_too_deep_is_a_skipped_line(tmp_path):
    run = crafted_run(tmp_path / "sent")
    with (run / "metrics.jsonl").open("a") as fh:
        fh.write('{"global_step": 4, "loss": ' + "[" * 5000 + "]" * 5000 + "}\n")
    out = write_report(run)
    assert "metrics.jsonl: skipped 1 unreadable line(s)" in (out / "report.md").read_text()


# (a final's stage.json as sent, what the final's problem says)
MARKERS = [
    # nested past the limit: was a bare RecursionError from json.loads wherever a final is checked
    ('{"stage": ' + "[" * 100_000 + "]" * 100_000 + "}", f"its stage.json: JSON nested deeper than {MAX_DEPTH} levels; "
                                                          "not read"),
    ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), f"its stage.json: JSON nested deeper than {MAX_DEPTH} levels"),
    # within the limit, still no marker: said as before
    ("[" * MAX_DEPTH + "]" * MAX_DEPTH, "its stage.json is not a stage's marker"),
    ('{"stage": "a", "files": ', "no complete stage.json"),  # cut short by a kill
]


@pytest.mark.parametrize(("marker", "problem"), MARKERS, ids=["deep", "just-past", "at-limit", "cut-short"])
def test_a_final_marker_nested_too_deep_is_refused_naming_it(tmp_path, marker, problem):
    from core.rundir.records import final_info, final_problem
    from eval.checkpoint import check_final

    final = tmp_path / "final"
    final.mkdir()
    (final / "stage.json").write_text(marker)
    assert final_problem(final).startswith(problem)
    assert final_info(final) is None, "never handed on"
    # python -m eval of a final copied out of its run: one config error naming the marker
    with pytest.raises(ConfigError, match=rf"^model={final}: damaged since it was published \({problem}"):
        check_final(str(final))


def test_a_sweep_job_folder_that_is_a_link_is_skipped_by_name(tmp_path):
    sweep = tmp_path / "multirun" / "s"
    sweep.mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    job = make_job(sweep, 0, ["seed=1"], manifest=done_manifest({"2ppl": 0.5}))
    done_validation(job, {"2ppl": 0.5})
    elsewhere = make_job(tmp_path / "elsewhere", 7, ["seed=2"], error="RuntimeError: planted-elsewhere\n")
    (sweep / "1").symlink_to(elsewhere, target_is_directory=True)
    title, blocks = sweep_report(sweep, sweep / "report")
    text = " ".join(str(getattr(b, "text", "")) + str(getattr(b, "rows", "")) for b in blocks)
    assert "planted-elsewhere" not in text, "the linked folder's error.txt is no job of this sweep"
    assert "skipped 1: a link, not a job folder of this sweep" in text
    assert "**jobs** 1 (1 done)" in text


# Each value in a step row's completions/mean_length: a number that is no measurement is a gap (NaN) at its step.
@pytest.mark.parametrize(("value", "gap"), [
    (float("inf"), True), (float("-inf"), True), (float("nan"), True),
    (1e39, True), (-1e308, True),  # beyond float32: no tensor's value; near float64's largest the axes overflow
    (10 ** 400, True),  # JSON holds an int too large for a float
    (3e38, False), (-3e38, False),  # float32's range: drawn
])
def test_a_metric_that_is_no_number_is_a_gap_and_the_report_is_drawn(tmp_path, value, gap):
    steps = [step_row(1, 2, k, k) for k in (1, 2, 3)]
    steps[1]["completions/mean_length"] = value
    steps[1]["completions/max_length"] = -value if isinstance(value, float) else value  # the band's edge too
    steps[1]["reward"] = value
    run = crafted_run(tmp_path / "sent", steps=steps)
    out = write_report(run)
    assert {"length.png", "reward.png"} <= {p.name for p in out.glob("*.png")}
    length = rs.step_series(rs.load_run(run).steps, "completions/mean_length")
    assert length.x == [1, 2, 3] and math.isnan(length.y[1]) == gap


DEEP = "[" * 100_000 + "]" * 100_000  # json.loads of this is a RecursionError


# (the file of a checkpoint someone sent, what reads it): each must name the file, never recurse out
CHECKPOINT_FILES = [
    # the model's config, read before any model loads (the head size vLLM's CPU kernel needs, eval's checks)
    ("config.json", lambda folder: planned_model_fields({"source": "hub", "id": str(folder)})),
    # the shard index: which safetensors files hold the weights eval checks against the architecture
    ("model.safetensors.index.json", file_weights),
    # the same index as vLLM's validation engine reads it to load a checkpoint in place
    ("model.safetensors.index.json", lambda folder: list(checkpoint_tensors(folder))),
]


@pytest.mark.parametrize(("name", "read"), CHECKPOINT_FILES, ids=["config", "index-weights", "index-vllm"])
def test_a_checkpoint_file_nested_too_deep_is_refused_naming_it(tmp_path, name, read):
    (tmp_path / name).write_text(DEEP)
    with pytest.raises(ParseLimitError, match=rf"{name}: JSON nested deeper than {MAX_DEPTH} levels"):
        read(tmp_path)


def test_a_tokenizer_config_nested_too_deep_is_no_chat_template(tmp_path):
    """Read only to say whether the tokenizer has a chat template: past the limit it has none (a config error
    naming the missing template follows), not a RecursionError."""
    (tmp_path / "tokenizer_config.json").write_text(DEEP)
    assert _has_chat_template(tmp_path) is False
