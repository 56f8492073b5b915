"""The report's Training rollouts section: per GRPO stage a few whole groups from `rollouts.jsonl`, chosen to
teach what GRPO learns from.

A group is one prompt's completions at one step (`train/rollouts.py` samples whole groups: each completion with
its reward per component, the weighted reward and the advantage GRPO trained on). GRPO learns only from a group
whose rewards differ: its advantages push the best completion up and the worst down. So each stage shows the
group with the widest spread of rewards (its best and worst completion in full) and a group whose rewards were
all equal (every advantage 0: nothing learned from it), each with its prompt folded and a table of every
completion's components and advantage. The file is untrusted like every file of a run folder: read without
following a link out of the run, numbers checked, text escaped where it is shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core.rundir.files import ROLLOUTS, scan_jsonl
from eval.report.blocks import Completion, Folded, Heading, Table, Text, code, fmt
from eval.report.samples import SHOWN_CHARS
from eval.report.series import as_number

# rollouts.jsonl of a long run samples 2 groups every 10 steps: a few MB; a larger file is not read
MAX_ROLLOUTS_BYTES = 64 * 2**20


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
    """The sampled rows as groups: consecutive rows of one stage, step and prompt (TRL repeats each prompt
    `num_generations` times in a row).

    >>> rows = [{"stage": 2, "stage_step": 1, "prompt": p, "reward": r} for p, r in [("a", 1), ("a", 0), ("b", 0)]]
    >>> [(g.prompt, g.rewards, g.spread) for g in groups_of(rows)]
    [('a', [1.0, 0.0], 1.0), ('b', [0.0], 0.0)]
    """
    found: list[Group] = []
    for row in rows:
        stage, step = as_number(row.get("stage")), as_number(row.get("stage_step"))
        if stage is None or step is None:
            continue
        key = (int(stage), int(step), str(row.get("prompt")))
        if found and (found[-1].stage, found[-1].stage_step, found[-1].prompt) == key:
            found[-1].rows.append(row)
        else:
            found.append(Group(key[0], str(row.get("stage_name") or key[0]), key[1], key[2], [row]))
    return found


def teaching_groups(groups: Sequence[Group]) -> list[tuple[str, Group]]:
    """Per stage (in order): the group with signal whose rewards spread widest (the latest of equals), and the last
    group without signal, each with what it is.

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


def _components(group: Group) -> list[str]:
    return list(dict.fromkeys(k for row in group.rows if isinstance(row.get("rewards"), dict) for k in row["rewards"]))


def group_table(group: Group) -> Table:
    """Each completion's reward per component, its weighted reward and its advantage."""
    names = _components(group)
    rows = []
    for k, row in enumerate(group.rows):
        parts = row.get("rewards") if isinstance(row.get("rewards"), dict) else {}
        rows.append([str(k + 1), *(fmt(as_number(parts.get(name)), 2) for name in names),
                     fmt(as_number(row.get("reward")), 3), _signed(as_number(row.get("advantage")))])
    return Table(["completion", *names, "reward (weighted)", "advantage"], rows)


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


def _text(row: dict) -> str:
    text = str(row.get("completion") or "")
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}\n… ({len(text) - SHOWN_CHARS} more characters)"


def group_blocks(why: str, group: Group) -> list:
    """One group: what it is, its prompt (folded), its table, then its best and worst completion (or, without
    signal, its first: they all scored alike)."""
    rewards = [r for r in group.rewards if r is not None]
    blocks: list = [Heading(f"{group.stage_name}, step {group.stage_step}: a group {why}", level=3),
                    Folded("the prompt", group.prompt), group_table(group)]
    if group.spread > 0:
        best = max(range(len(group.rows)), key=lambda i: group.rewards[i] if group.rewards[i] is not None else -1e9)
        worst = min(range(len(group.rows)), key=lambda i: group.rewards[i] if group.rewards[i] is not None else 1e9)
        for label, i in (("best", best), ("worst", worst)):
            row = group.rows[i]
            blocks += [Text(f"**{label}**: completion {i + 1}, reward {fmt(group.rewards[i], 3)}, advantage "
                            f"{_signed(as_number(row.get('advantage')))}"), Completion(_text(row))]
    else:
        reward = fmt(rewards[0], 3) if rewards else "-"
        blocks += [Text(f"all {len(group.rows)} completions scored {reward}: GRPO's advantage is each reward less the "
                        "group's mean, so every one is 0 and this group moved nothing. The first:"),
                   Completion(_text(group.rows[0]))]
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
    if path.stat().st_size > MAX_ROLLOUTS_BYTES:
        return [*blocks, Text(f"{code(ROLLOUTS)} is over {MAX_ROLLOUTS_BYTES >> 20} MB: not read", True)]
    scan = scan_jsonl(path, inside=run_dir)
    if scan.damaged:
        blocks.append(Text(f"{code(ROLLOUTS)}: skipped {len(scan.damaged)} unreadable line(s)", True))
    chosen = teaching_groups(groups_of(scan.rows))
    if not chosen:
        return [*blocks, Text("no whole group of two or more completions sampled yet", True)]
    for why, group in chosen:
        blocks += group_blocks(why, group)
    return blocks
