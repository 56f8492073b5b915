"""Sample sizes and intervals everywhere an accuracy is shown; seeds averaged over; distinct validation pools."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from core.stats import change
from curriculum.plan import Stage
from curriculum.tasks.kk import KKTask, canonical_key, kk_record
from curriculum.tasks.kk.sources import load_records
from eval.report.cli import write_report
from eval.validation import results_table
from tests.pools import held_out_pools, stage_pool
from tests.report.test_report import KK_REPORT, make_job, stage_entry, write_jsonl

# (rate before, n before, rate after, n after, expected mark): is a change beyond chance?
CHANGES = [
    (0.10, 100, 0.60, 100, 1),  # 10 -> 60 of 100: far outside the noise
    (0.60, 100, 0.10, 100, -1),  # the same, downwards
    (0.60, 100, 0.55, 100, 0),  # 5 points of 100 puzzles: noise
    (0.00, 4, 0.50, 4, 0),  # 0 -> 2 of 4 puzzles: the smoke run's noise, never a finding
    (0.00, 4, 1.00, 4, 1),  # 0 -> 4 of 4: even 4 puzzles cannot explain that by chance
    (0.30, 63, 0.50, 100, 1),  # unequal n (a deduplicated 2ppl pool beside another): still comparable
    (None, 100, 0.50, 100, 0),  # nothing before: nothing to compare
    (0.10, None, 0.90, 100, 0),  # n unknown (an old row): no claim
]


@pytest.mark.parametrize(("a", "n_a", "b", "n_b", "expected"), CHANGES)
def test_a_change_is_marked_only_beyond_chance(a, n_a, b, n_b, expected):
    assert change(a, n_a, b, n_b) == expected


def _run_with_accuracies(tmp_path: Path, accuracies: list[float], n: int) -> Path:
    """A done run whose 2ppl accuracy is `accuracies[k]` after stage k (0 = baseline), over `n` puzzles."""
    run = tmp_path / f"run-{n}"
    run.mkdir()
    stages = [stage_entry(k, 2, "done", 2 * (k - 1), 2 * k) for k in range(1, len(accuracies))]
    (run / "run.json").write_text(json.dumps({"status": "done", "stages": stages, "task_report": KK_REPORT}))
    rows = [{"stage": k, "stage_name": "baseline" if k == 0 else "2ppl", "global_step": 2 * k, "level": "2ppl",
             "accuracy": acc, "format_rate": acc, "mean_tokens": 50.0, "n": n, "puzzles": n, "with_reasoning": n}
            for k, acc in enumerate(accuracies)]
    write_jsonl(run / "validation.jsonl", rows)
    return run


def _accuracy_rows(markdown: str) -> list[str]:
    table = markdown.split("## Validation accuracy per subset")[1].split("\n## ")[0]
    return [line for line in table.splitlines() if line.startswith("| ") and "after stage" not in line]


def test_the_report_marks_changes_the_intervals_allow_and_only_those(tmp_path):
    markdown = (write_report(_run_with_accuracies(tmp_path, [0.1, 0.6, 0.55], 100)) / "report.md").read_text()
    rows = _accuracy_rows(markdown)
    assert rows[0].endswith("| 0.100 [0.06, 0.17] n=100 |")  # the baseline: nothing to compare with
    assert rows[1].endswith("| 0.600 [0.50, 0.69] n=100 ▲ |")  # 10 -> 60 of 100: real
    assert rows[2].endswith("| 0.550 [0.45, 0.64] n=100 |")  # 60 -> 55: noise, unmarked
    assert "Newcombe" in markdown  # the report says how a change is decided
    small = (write_report(_run_with_accuracies(tmp_path, [0.0, 0.5], 4)) / "report.md").read_text()
    assert "▲" not in "".join(_accuracy_rows(small)), "0 -> 2 of 4 puzzles is within noise"


def test_the_console_table_carries_intervals_and_fits_100_columns():
    rows = [{"ppl": ppl, "accuracy": 0.63, "lenient_accuracy": 0.7, "format_rate": 0.05, "truncation_rate": 1.0,
             "reasoning_agrees_rate": 0.5, "reasoning_settles_nobody": 0.25, "invented_name_rate": 0.0,
             "mean_tokens": 1512.3, "n": 100, "puzzles": 100, "with_reasoning": 64, "with_settling_reasoning": 48}
            for ppl in range(2, 8)]
    console = Console(width=100, record=True)
    console.print(results_table(rows, "validation after 6ppl", KKTask.report))
    lines = console.export_text().splitlines()
    assert max(map(len, lines)) <= 100
    body = [line for line in lines if re.match(r"\s+[2-7]\s+100\s", line)]
    assert len(body) == 6, "one line per subset at 100 columns"
    # accuracy, lenient, format, truncated, agrees (over the 48 whose reasoning settles someone), settles nobody
    # (over the 64 with reasoning), invented: each with its interval
    assert body[0].split()[2:] == ["63", "(53-72)", "70", "(60-78)", "5", "(2-11)", "100", "(96-100)", "50",
                                   "(36-64)", "25", "(16-37)", "0", "(0-4)", "1512.3"]


def _seed_job(sweep: Path, num: int, fmt: str, seed: int, accuracies: list[float]) -> None:
    """A done job of `reward.weights.format=fmt seed=seed`: 2ppl accuracy per stage (0 = baseline), n=100."""
    stages = [{**stage_entry(k, 2, "done", 2 * (k - 1), 2 * k), "final_metrics": {"2ppl": {"accuracy": acc}}}
              for k, acc in enumerate(accuracies) if k]
    job = make_job(sweep, num, ["+curriculum=kk_ladder", f"reward.weights.format={fmt}", f"seed={seed}"],
                   manifest={"status": "done", "stages": stages})
    write_jsonl(job / "validation.jsonl", [{"stage": k, "stage_name": "baseline" if k == 0 else "2ppl", "level": "2ppl",
                                            "global_step": 2 * k, "accuracy": acc, "n": 100, "puzzles": 100}
                                           for k, acc in enumerate(accuracies)])


def test_a_seed_sweep_is_summarised_as_mean_and_spread_not_plotted_against(tmp_path):
    sweep = tmp_path / "multirun" / "seeds"
    finals = {("0", 1): 0.40, ("0", 2): 0.50, ("0", 3): 0.60, ("1", 1): 0.20, ("1", 2): 0.20, ("1", 3): 0.30}
    for num, ((fmt, seed), final) in enumerate(finals.items()):
        _seed_job(sweep, num, fmt, seed, [0.0, final])
    markdown = (write_report(sweep) / "report.md").read_text()
    assert "**averaged over** `seed`" in markdown
    assert "final accuracy vs reward.weights.format" in markdown  # plotted against the format weight only
    assert "final accuracy vs seed" not in markdown and "over reward.weights.format x seed" not in markdown
    seeds = markdown.split("## Over seeds")[1].split("\n## ")[0]
    assert "**`reward.weights.format=0`**: seeds 1, 2, 3 (jobs 0, 1, 2)" in seeds
    # mean ± sample sd [min, max] over the three seeds, per stage: 0.4, 0.5, 0.6 -> 0.5 ± 0.1
    assert "| 2ppl | 0.500 ± 0.100 [0.40, 0.60] 3 seeds |" in seeds
    assert "| 2ppl | 0.233 ± 0.058 [0.20, 0.30] 3 seeds |" in seeds
    assert "| baseline | 0.000 ± 0.000 [0.00, 0.00] 3 seeds |" in seeds


def test_a_sweep_over_only_seeds_has_nothing_to_plot_against(tmp_path):
    sweep = tmp_path / "multirun" / "only-seeds"
    for num, seed in enumerate((1, 2)):
        _seed_job(sweep, num, "0", seed, [0.0, 0.25 * seed])
    markdown = (write_report(sweep) / "report.md").read_text()
    assert "no swept parameter to plot against but the seed" in markdown
    assert "| 2ppl | 0.375 ± 0.177 [0.25, 0.50] 2 seeds |" in markdown


def test_the_validation_pool_is_distinct_up_to_renaming_and_training_stays_disjoint(make_cfg):
    cfg = make_cfg()  # the default pools: eval.n 100, eval.seed 1234
    pool = held_out_pools(cfg, 2)["2ppl"]
    keys = [canonical_key(r.source) for r in pool]
    # 100 records asked, 63 distinct up to renaming (95 exist at 2ppl): each counted once
    assert len(pool) == len(set(keys)) == 63
    assert len(held_out_pools(cfg, 3)["3ppl"]) == 100  # no repeats at 3ppl
    stage = Stage(1, "2ppl", "grpo", {"2ppl": 1.0}, steps=1, pool=100)
    records, removed = stage_pool(cfg, stage, {"2ppl": pool})
    assert records and not {canonical_key(r.source) for r in records} & set(keys)
    assert removed > 0  # the generator did offer held-out puzzles (renamed), and they were dropped
    # the same training pool as with the 100 records before their repeats were dropped: training is unchanged
    with_repeats = [kk_record(r) for r in load_records("generated", 2, "test", n=100, seed=1234)]
    assert stage_pool(cfg, stage, {"2ppl": with_repeats}) == (records, removed)
