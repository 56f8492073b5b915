"""Completions chosen to teach: the Samples section (graded validation completions, `samples/<k>-<name>/<level>.jsonl`,
only folders inside the run's `samples/`, listed, never built from run.json's names) and the Training rollouts
section (per stage, from `rollouts.jsonl`, the GRPO group whose rewards spread widest and one whose were all equal).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from pathlib import Path

from core.rundir.files import BASELINE, ROLLOUTS, SAMPLES, scan_jsonl
from core.rundir.records import level_order
from curriculum.tasks.base import TaskReport
from eval.report.blocks import Completion, Folded, Heading, Table, Text, code, fmt, md_escape
from eval.report.series import as_number

# A larger file is not read (a validation of 100 puzzles at 4k tokens is ~2 MB; a long run's rollouts a few MB).
MAX_SAMPLES_BYTES = 64 * 2**20
# A completion is shown up to this many characters; the rest is in its samples file.
SHOWN_CHARS = 6000


def pick(rows: list[dict], task_picks: Sequence[tuple[str, str]] = ()) -> list[tuple[list[str], dict]]:
    """The picks of one subset's rows as (labels, row), each row once; a task's pick (label, key): the first `key`.

    >>> rows = [{"correct": False, "tokens": 9}, {"correct": True, "tokens": 3, "invented": ["liam"]}]
    >>> [(labels, row["tokens"]) for labels, row in pick(rows, [("names an invented person", "invented")])]
    [(['first right', 'shortest', 'names an invented person'], 3), (['first wrong', 'longest'], 9)]
    """
    def tokens(row: dict) -> float:
        return as_number(row.get("tokens")) or 0.0

    picks = [("first right", next((r for r in rows if r.get("correct") is True), None)),
             ("first wrong", next((r for r in rows if r.get("correct") is False), None)),
             ("longest", max(rows, key=tokens, default=None)), ("shortest", min(rows, key=tokens, default=None)),
             *((label, next((r for r in rows if r.get(key)), None)) for label, key in task_picks)]
    chosen: dict[int, tuple[list[str], dict]] = {}
    for label, row in picks:
        if row is not None:
            chosen.setdefault(id(row), ([], row))[0].append(label)
    return list(chosen.values())


def describe(labels: Sequence[str], row: dict, report: TaskReport) -> str:
    """One Markdown line: why it was picked, its grade, tokens, reference, answer, the task's facts, the reasons."""
    grade = "right" if row.get("correct") is True else "wrong"
    facts = [f"**{md_escape(' · '.join(labels))}**",  # a task's pick labels come from run.json
             f"{md_escape(report.record)} {code(row.get('id'))} sample {md_escape(row.get('sample'))}",
             f"**{grade}**", "format ok" if row.get("format_ok") else "format broken",
             f"{md_escape(row.get('tokens'))} tokens" + (" (truncated)" if row.get("truncated") else "")]
    answer = row.get("answer") if row.get("answered") else "none"
    facts += [f"reference: {md_escape(row.get('reference'))}", f"answer: {md_escape(answer)}"]
    facts += [f"{md_escape(label)}: {md_escape(', '.join(map(str, v)) if isinstance(v := row[key], list) else v)}"
              for label, key in report.facts if row.get(key) not in (None, "", [])]
    reasons = row.get("reasons") if isinstance(row.get("reasons"), list) else []
    if reasons:
        facts.append(f"reasons: {md_escape('; '.join(map(str, reasons)))}")
    return " · ".join(facts)


def _shown(text, where: str = " in the samples file") -> str:
    r"""The completion as shown: cut at SHOWN_CHARS; one of only whitespace spelled out (else it looks empty).

    >>> _shown("\n\n"), _shown("x" * (SHOWN_CHARS + 5))[-50:]
    ("(only whitespace: '\\n\\n')", 'xxxxxxxx\n… (5 more characters in the samples file)')
    """
    text = str(text or "")
    if not text.strip():
        return f"(only whitespace: {text!r})"
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}\n… ({len(text) - SHOWN_CHARS} more characters{where})"


def stage_folders(run_dir: Path, stage_names: dict[int, str]) -> list[tuple[int, str, Path]]:
    """(stage index, its name, folder) of every `samples/<k>-<name>/` that really lies inside the run, by index."""
    root = run_dir / SAMPLES
    if not root.is_dir() or root.is_symlink():
        return []
    found = [(int(index), folder) for folder in root.iterdir() if (index := folder.name.partition("-")[0]).isdigit()
             and folder.is_dir() and not folder.is_symlink() and folder.resolve().parent == root.resolve()]
    return [(index, stage_names.get(index) or (BASELINE if index == 0 else folder.name.partition("-")[2]), folder)
            for index, folder in sorted(found, key=lambda item: (item[0], item[1].name))]


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
    """The Samples section of a run: per stage and subset, the picks; a subset whose completions are the stage
    before's, row for row (a stage that learned nothing), says so once."""
    blocks = samples_intro(report)
    folders = stage_folders(run_dir, stage_names)
    if not folders:
        return [*blocks, Text("no samples/ folder with graded completions in this run", True)]
    shown: dict[str, tuple[str, list]] = {}  # level -> (the stage last shown, its completions)
    for index, name, folder in folders:
        files = subset_files(folder)
        if not files:
            blocks.append(Text(f"{md_escape(name)}: no subset files in {code(folder.name)}", True))
        for level, path in files:
            blocks.append(Heading(f"after {name}: {level}" if index else f"{name}: {level}", level=3))
            rows, notes = read_subset(path)
            texts = [(row.get("id"), row.get("sample"), row.get("completion")) for row in rows]
            earlier = shown.get(level)
            if rows and earlier is not None and earlier[1] == texts:
                blocks += [*notes, Text(f"the same {len(rows)} completions as after {md_escape(earlier[0])}, row "
                                        "for row: not shown again")]
                continue
            shown[level] = (name, texts)
            blocks += [*notes, *subset_blocks(rows, report)]
    return blocks


def read_subset(path: Path, inside: Path | None = None) -> tuple[list[dict], list]:
    """The rows of a jsonl file of completions, and notes on what could not be read."""
    if path.stat().st_size > MAX_SAMPLES_BYTES:
        return [], [Text(f"{code(path.name)} is over {MAX_SAMPLES_BYTES >> 20} MB: not read", True)]
    scan = scan_jsonl(path, inside=inside)
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


# --- Training rollouts ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """One prompt's completions at one step of a stage, in their order."""

    stage: int
    stage_name: str
    stage_step: int
    prompt: str
    rows: list[dict]

    @property
    def rewards(self) -> list[float | None]:
        return [as_number(row.get("reward")) for row in self.rows]

    @property
    def spread(self) -> float:
        """The best reward less the worst: 0 for a group without signal."""
        known = [r for r in self.rewards if r is not None]
        return max(known) - min(known) if known else 0.0


def groups_of(rows: Sequence[dict]) -> list[Group]:
    """The sampled rows as groups: consecutive rows of one stage, step and prompt (TRL repeats each prompt in a row).

    >>> rows = [{"stage": 2, "stage_step": 1, "prompt": p, "reward": r} for p, r in [("a", 1), ("a", 0), ("b", 0)]]
    >>> [(g.prompt, g.rewards, g.spread) for g in groups_of(rows)]
    [('a', [1.0, 0.0], 1.0), ('b', [0.0], 0.0)]
    """
    keyed = [((int(stage), int(step), str(row.get("prompt"))), row) for row in rows
             if None not in (stage := as_number(row.get("stage")), step := as_number(row.get("stage_step")))]
    groups = [(key, [row for _, row in members]) for key, members in groupby(keyed, key=itemgetter(0))]
    return [Group(stage, str(members[0].get("stage_name") or stage), step, prompt, members)
            for (stage, step, prompt), members in groups]


def teaching_groups(groups: Sequence[Group]) -> list[tuple[str, Group]]:
    """Per stage: the group with signal whose rewards spread widest (the latest of equals), the last without signal.

    >>> g = lambda stage, step, *rewards: Group(stage, f"s{stage}", step, "p", [{"reward": r} for r in rewards])
    >>> [(why[:11], x.stage, x.stage_step) for why, x in teaching_groups([g(1, 1, 0, 1), g(1, 2, 0, 0), g(1, 3, 1, 0)])]
    [('with signal', 1, 3), ('without sig', 1, 2)]
    """
    chosen = []
    for stage in dict.fromkeys(g.stage for g in groups):
        here = [g for g in groups if g.stage == stage and len(g.rows) > 1]
        signal = [g for g in here if g.spread > 0]
        if signal:
            chosen.append(("with signal: the widest spread of rewards", max(reversed(signal), key=lambda g: g.spread)))
        silent = [g for g in here if g.spread == 0]
        if silent:
            chosen.append(("without signal: every reward equal, every advantage 0", silent[-1]))
    return chosen


def group_table(group: Group) -> Table:
    """Each completion's reward per component, its weighted reward and its advantage."""
    names = list(dict.fromkeys(k for row in group.rows if isinstance(row.get("rewards"), dict) for k in row["rewards"]))
    rows = []
    for k, row in enumerate(group.rows):
        parts = row.get("rewards") if isinstance(row.get("rewards"), dict) else {}
        rows.append([str(k + 1), *(fmt(as_number(parts.get(name)), 2) for name in names),
                     fmt(as_number(row.get("reward")), 3), _signed(row.get("advantage"))])
    return Table(["completion", *names, "reward (weighted)", "advantage"], rows)


def _signed(value) -> str:
    return "-" if (number := as_number(value)) is None else f"{number:+.2f}"


def group_blocks(why: str, group: Group) -> list:
    """One group: what it is, its prompt (folded), its table, its best and worst completion (else its first)."""
    rewards = group.rewards
    known = {i: reward for i, reward in enumerate(rewards) if reward is not None}
    blocks: list = [Heading(f"{group.stage_name}, step {group.stage_step}: a group {why}", level=3),
                    Folded("the prompt", group.prompt), group_table(group)]
    if group.spread > 0:
        for label, i in (("best", max(known, key=known.__getitem__)), ("worst", min(known, key=known.__getitem__))):
            blocks += [Text(f"**{label}**: completion {i + 1}, reward {fmt(rewards[i], 3)}, advantage "
                            f"{_signed(group.rows[i].get('advantage'))}"),
                       Completion(_shown(group.rows[i].get("completion"), ""))]
    else:
        reward = fmt(next(iter(known.values())), 3) if known else "-"
        blocks += [Text(f"all {len(group.rows)} completions scored {reward}: GRPO's advantage is each reward less the "
                        "group's mean, so every one is 0 and this group moved nothing. The first:"),
                   Completion(_shown(group.rows[0].get("completion"), ""))]
    return blocks


def rollout_blocks(run_dir: Path) -> list:
    """The Training rollouts section of a run's report (none for a run without GRPO rollouts sampled)."""
    path = run_dir / ROLLOUTS
    if not path.is_file():
        return []
    blocks: list = [Heading("Training rollouts"),
                    Text(f"Whole groups sampled from training ({code(ROLLOUTS)}: every completion of one prompt at "
                         "one step, each with its reward per component and the advantage GRPO trained on). Per GRPO "
                         "stage: the group whose rewards spread widest, its best and worst completion in full, and a "
                         "group without signal.")]
    rows, notes = read_subset(path, inside=run_dir)
    blocks += notes
    if path.stat().st_size > MAX_SAMPLES_BYTES:
        return blocks
    chosen = teaching_groups(groups_of(rows))
    if not chosen:
        return [*blocks, Text("no whole group of two or more completions sampled yet", True)]
    for why, group in chosen:
        blocks += group_blocks(why, group)
    return blocks
