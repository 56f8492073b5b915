"""The report's Samples section: a few graded completions per stage and subset, chosen to teach.

From `samples/<k>-<name>/<level>.jsonl` (every validation completion with its grade): the first right
and the first wrong, the longest and the shortest, and the first of each kind the task names
(`TaskReport.picks`; K&K: one whose reasoning disagrees with its answer, one naming a person not in the
puzzle), when such exist. A completion picked for two reasons is shown once, with both. The folders
are listed, never built from run.json's names, and only those inside the run's `samples/` are read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from core.rundir.files import BASELINE, SAMPLES, scan_jsonl
from core.rundir.records import level_order
from curriculum.tasks.base import TaskReport
from eval.report.blocks import Completion, Folded, Heading, Text, code, md_escape
from eval.report.series import as_number

# A samples file larger than this is not read (a validation of 100 puzzles at 4k tokens is ~2 MB).
MAX_SAMPLES_BYTES = 64 * 2**20
# A completion is shown up to this many characters; the rest is in its samples file.
SHOWN_CHARS = 6000


def _tokens(row: dict) -> float:
    return as_number(row.get("tokens")) or 0.0


# (label, picker over the rows) of every task: each picks one row or None.
PICKS: tuple[tuple[str, Callable[[list[dict]], dict | None]], ...] = (
    ("first right", lambda rows: next((r for r in rows if r.get("correct") is True), None)),
    ("first wrong", lambda rows: next((r for r in rows if r.get("correct") is False), None)),
    ("longest", lambda rows: max(rows, key=_tokens, default=None)),
    ("shortest", lambda rows: min(rows, key=_tokens, default=None)),
)


def pick(rows: list[dict], task_picks: Sequence[tuple[str, str]] = ()) -> list[tuple[list[str], dict]]:
    """The teaching picks of one subset's rows, in first-chosen order: (labels, row), each row once; the task's
    picks (label, key) take the first row whose `key` is true.

    >>> rows = [{"correct": False, "tokens": 9}, {"correct": True, "tokens": 3, "invented": ["liam"]}]
    >>> [(labels, row["tokens"]) for labels, row in pick(rows, [("names an invented person", "invented")])]
    [(['first right', 'shortest', 'names an invented person'], 3), (['first wrong', 'longest'], 9)]
    """
    pickers = [*PICKS, *((label, _first_with(key)) for label, key in task_picks)]
    chosen: dict[int, tuple[list[str], dict]] = {}
    for label, picker in pickers:
        row = picker(rows)
        if row is not None:
            chosen.setdefault(id(row), ([], row))[0].append(label)
    return list(chosen.values())


def _first_with(key: str) -> Callable[[list[dict]], dict | None]:
    return lambda rows: next((r for r in rows if r.get(key)), None)


def _roles(names, roles) -> str:
    """ "Zoey knight, Oliver knave" from parallel names and roles (True / False / None): a K&K sample written
    before samples said their reference and answer in words."""
    words = {True: "knight", False: "knave", None: "?"}
    return ", ".join(f"{name} {words.get(role, '?')}" for name, role in zip(names, roles, strict=False))


def reference_and_answer(row: dict) -> tuple[object, object]:
    """A sample's reference and answer as text (a K&K sample from before they were written: from its roles)."""
    names = row.get("names") if isinstance(row.get("names"), list) else []
    if "reference" in row or not names:
        return row.get("reference"), row.get("answer")
    solution = row.get("solution") if isinstance(row.get("solution"), list) else []
    assignment = row.get("assignment") if isinstance(row.get("assignment"), dict) else {}
    return _roles(names, solution), _roles(names, [assignment.get(n) for n in names]) if row.get("answered") else None


def _fact(value) -> str:
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def describe(labels: Sequence[str], row: dict, report: TaskReport) -> str:
    """One Markdown line: why it was picked, its grade, tokens, reference, answer, the task's facts and the
    reasons (all escaped)."""
    grade = "right" if row.get("correct") is True else "wrong"
    facts = [f"**{md_escape(' · '.join(labels))}**",  # a task's pick labels come from run.json
             f"{md_escape(report.record)} {code(row.get('id'))} sample {md_escape(row.get('sample'))}",
             f"**{grade}**", "format ok" if row.get("format_ok") else "format broken",
             f"{md_escape(row.get('tokens'))} tokens" + (" (truncated)" if row.get("truncated") else "")]
    reference, answer = reference_and_answer(row)
    facts += [f"reference: {md_escape(reference)}", f"answer: {md_escape(answer if row.get('answered') else 'none')}"]
    facts += [f"{md_escape(label)}: {md_escape(_fact(row[key]))}" for label, key in report.facts
              if row.get(key) not in (None, "", [])]
    reasons = row.get("reasons") if isinstance(row.get("reasons"), list) else []
    if reasons:
        facts.append(f"reasons: {md_escape('; '.join(map(str, reasons)))}")
    return " · ".join(facts)


def _shown(text) -> str:
    r"""The completion as shown: cut at SHOWN_CHARS; one of only whitespace spelled out (else it looks empty).

    >>> _shown("\n\n"), _shown("x" * (SHOWN_CHARS + 5))[-50:]
    ("(only whitespace: '\\n\\n')", 'xxxxxxxx\n… (5 more characters in the samples file)')
    """
    text = str(text or "")
    if not text.strip():
        return f"(only whitespace: {text!r})"
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}\n… ({len(text) - SHOWN_CHARS} more characters in the samples file)"


def stage_folders(run_dir: Path) -> list[tuple[int, Path]]:
    """(stage index, folder) of every `samples/<k>-<name>/` that really lies inside the run, by index."""
    root = run_dir / SAMPLES
    if not root.is_dir() or root.is_symlink():
        return []
    inside = root.resolve()
    found = []
    for folder in root.iterdir():
        index = folder.name.partition("-")[0]
        if index.isdigit() and folder.is_dir() and not folder.is_symlink() and folder.resolve().parent == inside:
            found.append((int(index), folder))
    return sorted(found, key=lambda item: (item[0], item[1].name))


def subset_files(folder: Path) -> list[tuple[str, Path]]:
    """(level, file) of the regular `<level>.jsonl` files of one stage's folder, in level order."""
    found = [(f.name.removesuffix(".jsonl"), f) for f in folder.glob("*.jsonl") if f.is_file() and not f.is_symlink()]
    return sorted(found, key=lambda item: level_order(item[0]))


def samples_intro(report: TaskReport, files: str = "samples/<k>-<name>/<level>.jsonl") -> list:
    """The Samples section's heading and what it shows; `files`: where every completion is."""
    kinds = f", and one of each of these: {', '.join(label for label, _ in report.picks)}" if report.picks else ""
    return [Heading("Samples"),
            Text("A few graded validation completions per validation and subset, chosen to teach: the first "
                 f"right and the first wrong, the longest and the shortest{md_escape(kinds)} (when such "
                 f"exist), each with its {md_escape(report.record)} (folded), the reference and the answer "
                 f"read. Every completion: {code(files)}.")]


def samples_blocks(run_dir: Path, stage_names: dict[int, str], report: TaskReport) -> list:
    """The Samples section of a run: per stage (baseline first) and subset, the picks with their grades; a subset
    whose completions are those of the stage before, row for row (a stage that learned nothing), says so once."""
    blocks = samples_intro(report)
    folders = stage_folders(run_dir)
    if not folders:
        return [*blocks, Text("no samples/ folder with graded completions in this run", True)]
    shown: dict[str, tuple[str, list]] = {}  # level -> (the stage last shown, its completions)
    for index, folder in folders:
        name = stage_names.get(index) or (BASELINE if index == 0 else folder.name.partition("-")[2])
        files = subset_files(folder)
        if not files:
            blocks.append(Text(f"{md_escape(name)}: no subset files in {code(folder.name)}", True))
        for level, path in files:
            blocks.append(Heading(f"after {name}: {level}" if index else f"{name}: {level}", level=3))
            rows, notes = read_subset(path)
            earlier = shown.get(level)
            if rows and earlier is not None and _texts(earlier[1]) == _texts(rows):
                blocks += [*notes, Text(f"the same {len(rows)} completions as after {md_escape(earlier[0])}, row "
                                        "for row: not shown again")]
                continue
            shown[level] = (name, rows)
            blocks += [*notes, *subset_blocks(rows, report)]
    return blocks


def _texts(rows: list[dict]) -> list:
    """What makes two validations' samples the same: each record's completions, in order."""
    return [(row.get("id"), row.get("sample"), row.get("completion")) for row in rows]


def read_subset(path: Path) -> tuple[list[dict], list]:
    """One subset's graded completions, and notes on what could not be read."""
    if path.stat().st_size > MAX_SAMPLES_BYTES:
        return [], [Text(f"{code(path.name)} is over {MAX_SAMPLES_BYTES >> 20} MB: not read", True)]
    scan = scan_jsonl(path)
    notes = [Text(f"{code(path.name)}: skipped {len(scan.damaged)} unreadable line(s)", True)] if scan.damaged else []
    return scan.rows, notes


def subset_blocks(rows: list[dict], report: TaskReport) -> list:
    if not rows:
        return [Text("no graded completions in this file", True)]
    right = sum(r.get("correct") is True for r in rows)
    blocks: list = [Text(f"{len(rows)} completions, {right} right")]
    for labels, row in pick(rows, report.picks):
        blocks.append(Text(describe(labels, row, report)))
        if row.get("question"):
            blocks.append(Folded(f"the {report.record}", _shown(row["question"])))
        blocks.append(Completion(_shown(row.get("completion"))))
    return blocks
