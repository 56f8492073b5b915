"""Seeds in a sweep: averaged over, not plotted against.

A multirun over `seed=1,2,3` repeats one setting; the spread between its seeds is the run-to-run
noise a difference between settings must beat. Jobs that share every swept value but the seed form
a group; each group's validation accuracy per stage and subset is summarised as mean, standard
deviation (sample, n - 1) and min..max over its seeds.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from core.rundir.files import BASELINE
from core.rundir.records import level_order, row_level
from eval.report.blocks import Heading, Table, Text, code, md_escape, short_number
from eval.report.jobs import Job
from eval.report.series import as_number, load_run

SEED_KEYS = ("seed",)  # the override keys that name a seed


def seed_param(params: Sequence[str]) -> str | None:
    """The swept parameter that is a seed, if one is.

    >>> seed_param(["reward.weights.format", "seed"]), seed_param(["lr"])
    ('seed', None)
    """
    return next((p for p in params if p in SEED_KEYS), None)


def seed_groups(jobs: Sequence[Job], params: Sequence[str]) -> dict[tuple, list[Job]]:
    """Jobs keyed by their values of the swept parameters other than the seed, in job order."""
    others = [p for p in params if p not in SEED_KEYS]
    groups: dict[tuple, list[Job]] = {}
    for job in jobs:
        groups.setdefault(tuple((p, job.overrides.get(p)) for p in others), []).append(job)
    return groups


def spread_text(values: Sequence[float]) -> str:
    """Mean ± standard deviation [min, max] over seeds.

    >>> spread_text([0.4, 0.5, 0.6]), spread_text([0.25])
    ('0.500 ± 0.100 [0.40, 0.60] 3 seeds', '0.250 (1 seed)')
    """
    if len(values) == 1:
        return f"{values[0]:.3f} (1 seed)"
    return (f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f} "
            f"[{min(values):.2f}, {max(values):.2f}] {len(values)} seeds")


def stage_accuracies(rows: Sequence[dict]) -> dict[tuple[int, str], tuple[str, float]]:
    """(stage index, level) -> (stage name, accuracy) of one job's validation rows."""
    found = {}
    for row in rows:
        stage, level, accuracy = as_number(row.get("stage")), row_level(row), as_number(row.get("accuracy"))
        if stage is not None and level is not None and accuracy is not None:
            name = row.get("stage_name") or (BASELINE if stage == 0 else f"stage {int(stage)}")
            found[int(stage), level] = (str(name), accuracy)
    return found


def seed_table(jobs: Sequence[Job]) -> Table:
    """Stage rows x subset columns: the accuracy's mean ± sd [min, max] over the group's seeds."""
    cells: dict[tuple[int, str], list[float]] = {}
    names: dict[int, str] = {}
    for job in jobs:
        for (stage, level), (name, accuracy) in stage_accuracies(load_run(job.path).validation).items():
            cells.setdefault((stage, level), []).append(accuracy)
            names.setdefault(stage, name)
    levels = sorted({level for _, level in cells}, key=level_order)
    rows = [[names[stage], *(spread_text(cells[stage, level]) if (stage, level) in cells else "-"
                             for level in levels)]
            for stage in sorted(names)]
    return Table(["after stage", *levels], rows)


def seed_blocks(jobs: Sequence[Job], params: Sequence[str]) -> list:
    """A section per group of seeds: which jobs, and their accuracy per stage and subset over the seeds."""
    seed = seed_param(params)
    if seed is None:
        return []
    blocks: list = [Heading(f"Over seeds ({seed}): mean ± sd [min, max] per stage and subset"),
                    Text("Each job's accuracy counts once; the spread between seeds is the noise a difference "
                         "between settings must beat. Stages a seed has not validated yet are left out of its "
                         "cell (the count says how many seeds it holds).")]
    for key, group in seed_groups(jobs, params).items():
        setting = ", ".join(code(f"{p}={short_number(v)}") for p, v in key) or "every job"
        seeds = md_escape(", ".join(str(job.overrides.get(seed)) for job in group))
        blocks += [Text(f"**{setting}**: seeds {seeds} (jobs {md_escape(', '.join(job.name for job in group))})"),
                   seed_table(group)]
    return blocks
