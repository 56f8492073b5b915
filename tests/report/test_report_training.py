"""The run report's training sections on hand-made run folders: TRL's curves with the KL's reference refreshes
marked and explained, completion lengths per stage, throughput and memory, the collapse line in a stage's
paragraph, the run's history, and the table of contents."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from core.rundir.records import StageRecord
from eval.report import run as rl
from eval.report import story as rh
from eval.report import training as rt
from eval.report.blocks import Table
from eval.report.cli import write_report
from eval.report.story import COLLAPSE_SHARE, collapse_words, stage_words
from tests.report.test_report import write_jsonl


def stage(index: int, name: str, reference: str | None, start: int, **extra) -> dict:
    return {"index": index, "name": name, "level_label": name, "kind": "grpo", "status": "done", "steps_budget": 3,
            "steps_done": 3, "global_step_start": start, "global_step_end": start + 3, "reference": reference,
            "policy_init": reference, **extra}


def trl_row(index: int, name: str, stage_step: int, start: int, kl: float, **extra) -> dict:
    return {"stage": index, "stage_name": name, "level": name, "stage_step": stage_step,
            "global_step": start + stage_step, "kind": "step", "loss": 0.01, "grad_norm": 1.5, "learning_rate": 1e-6,
            "reward": 0.5, "reward_std": 0.3, "clip_ratio/region_mean": 0.0, "kl": kl, "entropy": 0.8,
            "completions/mean_length": 100.0 + stage_step, "completions/min_length": 20.0,
            "completions/max_length": 300.0, "num_tokens": 1000.0 * stage_step, "step_time": 2.0, **extra}


def make_run(root: Path, references: list[str | None], *, rows=None, manifest_extra=None) -> Path:
    """A run of len(references) three-step stages; stage k's reference as given (RUN: this run's folder)."""
    run = root / "run"
    run.mkdir(parents=True)
    names = [f"{k + 2}ppl" for k in range(len(references))]
    stages = [stage(k + 1, name, ref.replace("RUN", str(run)) if ref else None, 3 * k)
              for k, (name, ref) in enumerate(zip(names, references, strict=True))]
    (run / "run.json").write_text(json.dumps({"status": "done", "created": "2026-01-01T00:00:00", "stages": stages,
                                              **(manifest_extra or {})}))
    rows = rows if rows is not None else [trl_row(k + 1, name, s, 3 * k, kl=0.01 * (s - 1))
                                          for k, name in enumerate(names) for s in (1, 2, 3)]
    write_jsonl(run / "metrics.jsonl", rows)
    return run


@pytest.mark.parametrize(("references", "refreshed_at", "sentence"), [
    # reference: previous_stage: stage 2 measures KL against stage 1's final, stage 3 against stage 2's
    (["/base", "RUN/stages/1-2ppl/final", "RUN/stages/2-3ppl/final"], [3.5, 6.5], rt.REFRESH_SENTENCE),
    # reference: rl_start / base: one checkpoint throughout, never a refresh
    (["/base", "/base", "/base"], [], rt.NO_REFRESH_SENTENCE),
    # a final of some stage but not the one before (stage 3 against stage 1's): no refresh there
    (["/base", "RUN/stages/1-2ppl/final", "RUN/stages/1-2ppl/final"], [3.5], rt.REFRESH_SENTENCE),
    # a KL logged but no reference in run.json (an older run): nothing marked, and not claimed either way
    ([None, None, None], [], rt.UNKNOWN_REFERENCE_SENTENCE),
])
def test_the_kl_panel_marks_a_refresh_at_each_boundary_where_the_reference_became_the_stage_befores_final(
        tmp_path, references, refreshed_at, sentence):
    run = make_run(tmp_path, references)
    manifest = json.loads((run / "run.json").read_text())
    assert [event.step for event in rt.reference_refreshes(manifest)] == refreshed_at
    markdown = (write_report(run) / "report.md").read_text()
    # the sawtooth explained in one sentence where there is one; otherwise why there is none
    said = [s for s in (rt.REFRESH_SENTENCE, rt.NO_REFRESH_SENTENCE, rt.UNKNOWN_REFERENCE_SENTENCE) if s in markdown]
    assert said == [sentence]
    assert "](training_curves.png)" in markdown


def test_curves_missing_from_an_older_run_are_notes_and_the_rest_is_drawn(tmp_path):
    rows = [{"stage": 1, "stage_step": s, "global_step": s, "kind": "step", "loss": 0.1 * s} for s in (1, 2)]
    run = make_run(tmp_path, ["/base"], rows=rows)
    markdown = (write_report(run) / "report.md").read_text()
    for missing in ("grad_norm", "learning_rate", "reward_std", "clip_ratio/region_mean", "kl"):
        assert f"no numeric `{missing}` in metrics.jsonl" in markdown
    assert "](training_curves.png)" in markdown  # the loss alone
    assert "no `num_tokens` and `step_time` in metrics.jsonl: tokens per second skipped" in markdown


def test_the_per_stage_table_reads_each_stage_from_its_first_to_its_last_step(tmp_path):
    run = make_run(tmp_path, ["/base", "RUN/stages/1-2ppl/final"])
    manifest = json.loads((run / "run.json").read_text())
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    table = rt.stage_curves_table(manifest, rows)
    assert table.rows[0][0] == "2ppl" and table.rows[0][-1] == "0 → 0.02"  # KL from ~0 up: one tooth per stage
    assert table.rows[1][-1] == "0 → 0.02"


@pytest.mark.parametrize(("extra", "peak"), [
    ({}, None),  # TRL logs no memory: no column, a note
    ({"memory/peak_gb": 7.5}, "7.5"),  # a key naming memory, as a callback may log it: its peak per stage
])
def test_throughput_per_stage_and_memory_where_the_rows_have_it(tmp_path, extra, peak):
    rows = [trl_row(1, "2ppl", s, 0, kl=0.0, **({k: v + s for k, v in extra.items()})) for s in (1, 2, 3)]
    run = make_run(tmp_path, ["/base"], rows=rows)
    markdown = (write_report(run) / "report.md").read_text()
    # num_tokens grows by 1000 a step over a 2 s step: 500 tokens/s
    header = "| stage | tokens/s median | step_time median (s) | validation tokens/s |"
    assert header + (" peak memory/peak_gb |" if peak else "") in markdown
    assert ("| 2ppl | 500 | 2 | - | 10.5 |" if peak else "| 2ppl | 500 | 2 | - |") in markdown
    assert ("no memory in metrics.jsonl" in markdown) == (peak is None)


ENTROPY_ROWS = {
    # halved and more by the stage's last step: a collapse, from the step it fell under half the first value
    "collapsing": [0.8, 0.6, 0.3, 0.1],
    "steady": [0.8, 0.79, 0.82, 0.8],
    # dipped under half and recovered by its last step: no collapse
    "recovered": [0.8, 0.2, 0.7, 0.75],
    # already under half when the stage started (collapsed in an earlier stage): said from its first step
    "collapsed before": [0.3, 0.2, 0.25, 0.2],
}


@pytest.mark.parametrize(("series", "expected"), [
    ("collapsing", "entropy collapsed: under 50% of the run's first value (0.8 at global step 1) from step 3 (0.3)"),
    ("steady", None),
    ("recovered", None),
    ("collapsed before", "entropy collapsed: under 50% of the run's first value (0.8 at global step 1) from its "
                         "first step (0.3)"),
])
def test_a_stage_paragraph_says_when_entropy_collapses_and_not_when_it_holds(series, expected):
    rows = [{"stage": 2, "stage_step": s, "global_step": 10 + s, "entropy": e, "reward": 0.1}
            for s, e in enumerate(ENTROPY_ROWS[series], start=1)]
    words = collapse_words(rows, "entropy", "entropy", (1, 0.8))
    assert (words is None) if expected is None else words.startswith(expected)
    paragraph = stage_words(StageRecord(index=2, name="3ppl", kind="grpo", steps_budget=4), rows, [],
                            {"entropy": (1, 0.8)})
    assert ("entropy collapsed" in paragraph) == (expected is not None)
    assert COLLAPSE_SHARE == 0.5


def test_a_length_collapse_is_said_in_the_report(tmp_path):
    rows = [trl_row(1, "2ppl", s, 0, kl=0.0, **{"completions/mean_length": length})
            for s, length in zip((1, 2, 3), (400.0, 150.0, 60.0), strict=True)]
    run = make_run(tmp_path, ["/base"], rows=rows)
    markdown = (write_report(run) / "report.md").read_text()
    assert "mean completion length collapsed: under 50% of the run's first value (400 at global step 1) from " \
           "step 2 (150) to its last (60)" in markdown
    assert "entropy collapsed" not in markdown  # 0.8 throughout


def samples(run: Path, folder: str, level: str, tokens: list) -> None:
    (run / "samples" / folder).mkdir(parents=True, exist_ok=True)
    write_jsonl(run / "samples" / folder / f"{level}.jsonl", [{"tokens": t, "completion": "x"} for t in tokens])


def test_completion_lengths_per_stage_from_the_samples_files_and_the_step_rows(tmp_path):
    run = make_run(tmp_path, ["/base", "/base"])
    samples(run, "0-baseline", "2ppl", [10, 20, 30])
    samples(run, "1-2ppl", "2ppl", [15, "many", None, 25])  # what is no number is left out
    samples(run, "1-2ppl", "3ppl", [40])
    boxes, notes = rl.validation_boxes(run, {0: "baseline", 1: "2ppl", 2: "3ppl"})
    assert boxes.stages == ["baseline", "2ppl"] and notes == []
    assert boxes.groups == {"2ppl": [[10.0, 20.0, 30.0], [15.0, 25.0]], "3ppl": [[], [40.0]]}
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    training = rl.training_boxes(json.loads((run / "run.json").read_text()), rows)
    assert training.groups == {"": [[101.0, 102.0, 103.0], [101.0, 102.0, 103.0]]}
    assert training.extremes == [(20.0, 300.0), (20.0, 300.0)]
    assert "](length_per_stage.png)" in (write_report(run) / "report.md").read_text()


def test_without_samples_the_validation_length_distribution_is_a_note(tmp_path):
    run = make_run(tmp_path, ["/base"])
    markdown = (write_report(run) / "report.md").read_text()
    assert "the validation length distribution is skipped" in markdown and "](length_per_stage.png)" in markdown


def test_the_history_names_resumes_retrains_skipped_checkpoints_failures_and_warnings(tmp_path):
    run = make_run(tmp_path, ["/base", "/base", "/base"])
    manifest = json.loads((run / "run.json").read_text())
    manifest["stages"][0]["resumed_from"] = "stages/1-2ppl/trainer/checkpoint-2"
    manifest["stages"][1]["skipped_checkpoints"] = [{"checkpoint": "checkpoint-3", "problem": "no trainer_state.json"}]
    manifest["stages"][1]["warnings"] = [{"reward": "mine", "warning": "scored none of the batch's 8 completions"}]
    manifest["stages"][2].update(status="failed", error="RewardError: <b>x</b>")
    (run / "run.json").write_text(json.dumps(manifest))
    (run / "stages" / "2-3ppl" / "final.refused").mkdir(parents=True)
    for time in ("2026-01-01_02-00-00", "2026-01-01_01-00-00"):
        (run / ".hydra" / f"resume-{time}").mkdir(parents=True)
    rows = rh.history_rows(run, manifest)
    assert [row[:2] for row in rows] == [["2ppl", "interrupted, resumed"], ["3ppl", "retrained"],
                                         ["3ppl", "checkpoint skipped"], ["3ppl", "warning"], ["4ppl", "failed"]]
    assert rows[2][2] == "checkpoint-3: no trainer_state.json"
    markdown = (write_report(run) / "report.md").read_text()
    assert "3 attempts: started 2026-01-01T00:00:00, resumed 2026-01-01_01-00-00, 2026-01-01_02-00-00" in markdown
    assert "| 4ppl | failed | RewardError: \\<b\\>x\\</b\\> |" in markdown  # run.json's text escaped
    assert "| stage | what happened | detail |\n|:---|:---|:---|" in markdown  # words, aligned left
    html = (run / "report" / "report.html").read_text()
    assert "<b>x</b>" not in html


def test_a_run_that_went_straight_through_says_so(tmp_path):
    blocks = rh.history_blocks(make_run(tmp_path, ["/base"]), {"created": "t", "stages": [{"index": 1}]})
    assert not any(isinstance(b, Table) for b in blocks)
    assert "never resumed" in blocks[1].text and "no stage was interrupted" in blocks[2].text


def test_the_contents_link_every_section_heading_and_each_link_lands_on_one(tmp_path):
    run = make_run(tmp_path, ["/base", "RUN/stages/1-2ppl/final"])
    out = write_report(run)
    markdown, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    head, *sections = markdown.split("\n## ")
    links = re.findall(r"^- \[(.*)\]\(#([^)]*)\)$", head, flags=re.M)
    assert [text for text, _ in links] == [s.split("\n", 1)[0] for s in sections]  # every section, in order
    ids = re.findall(r"<h2 id=\"([^\"]*)\">", html)
    assert [anchor for _, anchor in links] == ids and len(set(ids)) == len(ids)
    assert {"trls-training-curves", "history", "throughput-and-memory"} <= set(ids)


@pytest.mark.parametrize(("kinds", "labels"), [
    (["grpo", "grpo"], ["loss"]),  # one kind: one line
    # an SFT cold start's loss is cross-entropy, GRPO's ~0 by construction: never one line across both
    (["sft", "grpo"], ["loss (SFT)", "loss (GRPO)"]),
    ([None, "grpo"], ["loss"]),  # an entry without a kind reads as GRPO's
])
def test_the_loss_is_one_line_per_stage_kind(kinds, labels):
    manifest = {"stages": [{"index": k + 1, "kind": kind} for k, kind in enumerate(kinds)]}
    rows = [{"stage": k + 1, "global_step": k + 1, "loss": 0.5} for k in range(len(kinds))]
    assert [s.label for s in rt.loss_series(manifest, rows)] == labels
