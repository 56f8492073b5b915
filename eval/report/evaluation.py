"""The report of a `python -m eval` folder (`outputs/eval/<time>/`): one model validated on every subset.

The folder holds `evaluation.json` (the model, the task and how its report shows it), `config.yaml`,
`validation.jsonl` (a row per subset) and `samples/<level>.jsonl`. Like a run folder it is untrusted: read
without following a link out of it, every text escaped where it is shown (an evaluation.json whose task
record does not read is shown as every task is).
"""

from __future__ import annotations

from pathlib import Path

from core.rundir.files import EVALUATION, SAMPLES, VALIDATION, read_mapping, scan_jsonl
from core.rundir.records import level_order, row_level
from core.stats import rate_text
from curriculum.tasks.base import TaskReport
from eval.metrics import trials
from eval.report.blocks import Heading, Image, Table, Text, code, fmt, md_escape
from eval.report.plots import plot_stage_grid
from eval.report.samples import read_subset, samples_intro, subset_blocks, subset_files
from eval.report.series import StageGrid, as_number
from eval.report.tables import pool_sizes


def is_evaluation(path: Path) -> bool:
    """A `python -m eval` folder: it holds evaluation.json."""
    return (path / EVALUATION).is_file()


def _rates(report: TaskReport) -> list[tuple[str, str, tuple[str, ...]]]:
    """(row key, column header, the columns counting its trials) of the rates the table shows, accuracy first."""
    beside = [(r.key, r.name, r.counted) for r in report.rates if r.beside_accuracy]
    others = [(r.key, r.name, r.counted) for r in report.rates if not r.beside_accuracy and r.title]
    return [("accuracy", "accuracy", ()), *beside, ("format_rate", "format", ()),
            ("truncation_rate", "truncated", ()), *others]


def subsets_table(rows: list[dict], report: TaskReport) -> Table:
    """A row per subset: every rate with its 95% Wilson interval and n, then the mean length in tokens."""
    rates = _rates(report)
    cells = [[str(row_level(row)), *(rate_text(as_number(row.get(key)), trials(row, key, counted))
                                     for key, _, counted in rates), fmt(as_number(row.get("mean_tokens")), 1)]
             for row in rows]
    return Table(["subset", *(name for _, name, _ in rates), "mean tokens"], cells)


def evaluation_report(folder: Path, out_dir: Path) -> tuple[str, list]:
    """The title and blocks of a `python -m eval` folder's report; draws its accuracy plot into `out_dir`."""
    record = read_mapping(folder / EVALUATION, inside=folder)
    report = TaskReport.from_json(record.get("task_report")) or TaskReport()
    scan = scan_jsonl(folder / VALIDATION, inside=folder)
    rows = sorted((r for r in scan.rows if row_level(r) is not None), key=lambda r: level_order(row_level(r)))
    model = record.get("model") or next((r.get("stage_name") for r in rows), None)
    facts = [f"**model** {code(fmt(model))}", f"**task** {md_escape(fmt(record.get('task')))}",
             f"**validated** {md_escape(fmt(record.get('created')))}"]
    blocks: list = [Text(" · ".join(facts))]
    if scan.damaged:
        blocks.append(Text(f"{code(VALIDATION)}: skipped {len(scan.damaged)} unreadable line(s)", True))
    blocks.append(Heading("Validation per subset"))
    if not rows:
        return f"Validation report: {folder.name}", [*blocks, Text("no rows in validation.jsonl yet", True)]
    levels = [row_level(r) for r in rows]
    grid = StageGrid(["the model"], levels, {row_level(r): [as_number(r.get("accuracy"))] for r in rows},
                     {row_level(r): [trials(r, "accuracy")] for r in rows})
    chance = {level: value for level, value in report.chance.items() if level in grid.levels}
    image = plot_stage_grid(grid, f"accuracy ({report.accuracy})", "Accuracy per subset", out_dir / "accuracy.png",
                            unit_range=True, chance=chance, xlabel="")
    dotted = f"; dotted: {report.chance_note}" if chance and report.chance_note else ""
    blocks += [b for b in (pool_sizes(rows, report),) if b is not None]
    blocks += [Image(image, f"accuracy per subset with its 95% Wilson interval{dotted}"), subsets_table(rows, report),
               Text("Each rate: its value, its 95% Wilson interval [low, high] and n, the distinct "
                    f"{md_escape(report.record)}s it counts.")]
    blocks += _samples(folder, report)
    return f"Validation report: {model or folder.name}", blocks


def _samples(folder: Path, report: TaskReport) -> list:
    """The picks of each subset's graded completions (`samples/<level>.jsonl`)."""
    blocks = samples_intro(report, "samples/<level>.jsonl")
    root = folder / SAMPLES
    files = subset_files(root) if root.is_dir() and not root.is_symlink() else []
    if not files:
        return [*blocks, Text("no graded completions in samples/", True)]
    for level, path in files:
        rows, notes = read_subset(path)
        blocks += [Heading(level, level=3), *notes, *subset_blocks(rows, report)]
    return blocks
