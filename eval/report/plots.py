"""The report's figures: series from `eval.report.series` -> PNG files, drawn with the object API on an Agg canvas,
never pyplot (no display needed, no figure outlives its save). Labels come from run folders, so mathtext is off:
"$x^{$" is drawn as text instead of failing the report."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from matplotlib import colormaps, rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from eval.report.series import Boundary, Series, StageGrid, intervals
from eval.report.story import GUARD, PROMOTION, REFRESH, Event

# A subset keeps one colour and marker in every figure, by the first number of its level (2ppl and 2steps: the
# green circle); ColorBrewer Dark2, apart from the training lines' blue. Markers shrink with the number, so
# subsets with equal values stay visible on top of each other.
LEVEL_STYLE = {2: ("#1b9e77", "o"), 3: ("#d95f02", "s"), 4: ("#7570b3", "D"), 5: ("#e7298a", "^"),
               6: ("#66a61e", "v"), 7: ("#a6761d", "P"), 8: ("#666666", "X")}
NO_VALUE_GREY = colormaps["viridis"].with_extremes(bad="0.88")  # a heatmap cell without a finished job
STEP_LABEL = "global step (optimizer steps, all stages)"
UNIT_RANGE = (-0.03, 1.03)  # a rate or share's y axis
# (colour, marker, legend name, height in the axes) of each kind of event; a refresh sits at the foot, where the
# KL it resets falls (the stage labels take the top)
EVENT_STYLE = {PROMOTION: ("#1a9641", "^", "promoted on skill", 0.97), GUARD: ("#d7191c", "X", "collapse guard", 0.97),
               REFRESH: ("#2c7bb6", "D", "reference refreshed", 0.04)}
# What the accuracy panels of the sweep's and the comparison's curves show, said under them.
CURVES_NOTE = ("accuracy after each stage (band: its 95% interval), the mean over the subsets validated at every "
               "point of every curve, else each subset in its own panel, broken where a validation left it out")


@dataclass(frozen=True)
class Panel:
    """One axes of a per-step figure: training lines, an optional min/max band, validation markers."""

    title: str
    ylabel: str
    lines: Sequence[Series]
    markers: Sequence[Series] = ()
    band: tuple[Series, Series] | None = None
    unit_range: bool = False  # a rate or share: the y axis fixed to 0..1, so a flat line is not magnified
    events: Sequence[Event] = ()


@dataclass(frozen=True)
class StageBoxes:
    """One panel: per group (a subset; "" for all) the values of each stage ([] where none); `extremes`: per stage
    a (lowest, highest) drawn as triangles."""

    title: str
    ylabel: str
    stages: Sequence[str]
    groups: dict[str, list[list[float]]]
    extremes: Sequence[tuple[float | None, float | None]] = ()


def level_style(label: str) -> dict:
    """Plot keywords (colour, marker, its size) of a subset by the first number of its level."""
    found = re.search(r"\d+", label)
    number = int(found.group()) if found else 0
    color, marker = LEVEL_STYLE.get(number, ("black", "o"))
    return {"color": color, "marker": marker, "markersize": max(4.0, 12.0 - 2.0 * (number - 2)),
            "markeredgecolor": "black", "markeredgewidth": 0.5}


def error_bars(values: Sequence[float], low: Sequence | None, high: Sequence | None) -> list | None:
    """matplotlib's `yerr` (distances below and above each value) from interval bounds; 0 where unknown.

    >>> error_bars([0.5, 0.2], [0.15, None], [0.85, None])
    [[0.35, 0.0], [0.35, 0.0]]
    """
    if low is None or high is None:
        return None
    below = [0.0 if lo is None else round(v - lo, 6) for v, lo in zip(values, low, strict=True)]
    above = [0.0 if hi is None else round(hi - v, 6) for v, hi in zip(values, high, strict=True)]
    return [below, above]


def _bars(ax, values: Sequence, low: Sequence, high: Sequence, shift: float, **style) -> None:
    """Each known value at its position + `shift` (so side-by-side bars do not hide each other), with its bar."""
    points = [(x + shift, y, lo, hi) for x, (y, lo, hi) in enumerate(zip(values, low, high, strict=True))
              if y is not None]
    ys = [p[1] for p in points]
    ax.errorbar([p[0] for p in points], ys, yerr=error_bars(ys, [p[2] for p in points], [p[3] for p in points]),
                capsize=3, **style)


@contextmanager
def _figure(path: Path, title: str | None, rows: int, cols: int = 1, *, width: float = 10.0, height: float = 3.2,
            steps: bool = False) -> Iterator[tuple[Figure, list]]:
    """A figure with a rows x cols grid of axes (a flat list), laid out so labels never clip, drawn with mathtext off
    (text is drawn as written, never parsed) and saved to `path`; `steps`: the axes share the global-step axis."""
    with rc_context({"text.parse_math": False}):
        fig = Figure(figsize=(width, height * rows), layout="constrained")
        FigureCanvasAgg(fig)
        axes = [ax for row in fig.subplots(rows, cols, squeeze=False) for ax in row]
        yield fig, axes
        if steps:
            for ax in axes:
                ax.sharex(axes[0])
            axes[-1].set_xlabel(STEP_LABEL)
        if title:
            fig.suptitle(title, fontsize=12)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)


def _finish(ax, title: str, fontsize: int = 10, grid: str = "both") -> None:
    """Title, grid and a legend outside the axes on the right (none for a single line: the title names it)."""
    ax.set_title(title, fontsize=fontsize)
    ax.grid(alpha=0.3, axis=grid)
    if len(ax.get_legend_handles_labels()[0]) > 1:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


def _draw_panel(ax, panel: Panel, boundaries: Sequence[Boundary]) -> None:
    if panel.band is not None:
        low, high = panel.band
        ax.fill_between(low.x, low.y, high.y, alpha=0.2, color="C0", linewidth=0,
                        label=f"{low.label.split('/')[-1]} .. {high.label.split('/')[-1]}")
    for index, series in enumerate(panel.lines):
        ax.plot(series.x, series.y, color=f"C{index}", linewidth=1.4, label=series.label,
                marker="." if len(series.x) < 30 else None)
    for series in panel.markers:
        ax.errorbar(series.x, series.y, yerr=error_bars(series.y, series.low, series.high), linestyle="none",
                    label=f"validation {series.label}", capsize=3, **level_style(series.label))
    if panel.unit_range:
        ax.set_ylim(*UNIT_RANGE)
        ax.set_yticks([0.0, 0.25, 0.5, 0.75, 1.0])
    low, high = ax.get_ylim()
    ax.set_ylim(low, high + 0.2 * (high - low))  # headroom: the stage labels along the top sit on no data
    for boundary in boundaries:  # a dashed line where each stage starts, its level just right of it at the top
        ax.axvline(boundary.step, color="0.45", linestyle="--", linewidth=0.9, zorder=0)
        ax.annotate(boundary.label, xy=(boundary.step, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(2, -3), textcoords="offset points", rotation=90, ha="left", va="top",
                    fontsize=8, color="0.25")
    labelled = set()
    for event in panel.events:  # a dotted line and a marker for each event; one legend entry per kind
        color, marker, name, height = EVENT_STYLE[event.kind]
        ax.axvline(event.step, color=color, linestyle=":", linewidth=1.2, zorder=1)
        ax.plot([event.step], [height], marker=marker, color=color, markersize=8, linestyle="none",
                transform=ax.get_xaxis_transform(), label=None if event.kind in labelled else name)
        labelled.add(event.kind)
    ax.set_ylabel(panel.ylabel)
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))  # a learning rate as 1e-4, not 0.000100
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    _finish(ax, panel.title)


def plot_step_panels(panels: Sequence[Panel], boundaries: Sequence[Boundary], title: str, path: Path) -> Path:
    """Stacked panels sharing the global-step axis, each with the stage boundaries marked."""
    with _figure(path, title, len(panels), height=3.2 if len(panels) < 3 else 2.6, steps=True) as (_, axes):
        for ax, panel in zip(axes, panels, strict=True):
            _draw_panel(ax, panel, boundaries)
    return path


def chance_text(value: float) -> str:
    """A chance accuracy as it is written: a unit fraction as one, else its value.

    >>> chance_text(0.25), chance_text(0.3)
    ('1/4', '0.3')
    """
    inverse = 1 / value if value > 0 else 0
    return f"1/{round(inverse)}" if inverse >= 2 and abs(inverse - round(inverse)) < 1e-9 else f"{value:.3g}"


def grid_lines(grid: StageGrid) -> list[Series]:
    """A line per subset of `grid` across its stages, with each rate's 95% interval."""
    return [Series(level, grid.stages, grid.values[level],
                   *intervals(grid.values[level], grid.trials.get(level) or [None] * len(grid.stages)))
            for level in grid.levels]


def plot_categories(lines: Sequence[Series], path: Path, *, title: str, xlabel: str, ylabel: str,
                    chance: Mapping[str, float] | None = None, connect: bool = True, spread: float = 0.25,
                    missing: str | None = "not finished") -> Path:
    """A rate on 0..1 at each category (stage, swept value, run), one line per series ("mean" in bold black) with
    its bars, side by side; `chance`: a subset's accuracy by chance, dotted in its colour; `missing`: written where
    no line has a value (a swept value without a finished job)."""
    with _figure(path, None, 1, height=4.0) as (_, (ax,)):
        positions = list(range(len(lines[0].x))) if lines else []
        for series in lines:
            if (share := (chance or {}).get(series.label)) is not None:
                ax.axhline(share, color=level_style(series.label)["color"], linestyle=":", linewidth=1.2,
                           label=f"chance {series.label} ({chance_text(share)})", zorder=0)
        step = spread / max(1, len(lines) - 1) if len(lines) > 1 else 0.0
        for k, series in enumerate(lines):
            style = {"color": "black", "marker": "o", "linewidth": 2.5} if series.label == "mean" else \
                level_style(series.label)
            if not connect:
                style["linestyle"] = "none"
            none = [None] * len(positions)
            _bars(ax, series.y, series.low or none, series.high or none, step * (k - (len(lines) - 1) / 2),
                  label=series.label, **style)
        if lines:
            ax.set_xticks(positions, lines[0].x, rotation=30 if len(positions) > 8 else 0)
            ax.set_xlim(-0.3, len(positions) - 0.7)
        for x in positions if missing else ():
            if all(series.y[x] is None for series in lines):
                ax.text(x, 0.5, missing, rotation=90, ha="center", va="center", fontsize=8, color="0.4")
        ax.set_ylim(*UNIT_RANGE)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        _finish(ax, title, 12)
    return path


def plot_sweep_heatmaps(grids: Sequence[tuple[str, list, list, list, list]], row_param: str, col_param: str,
                        path: Path) -> Path:
    """One heatmap per (title, row values, column values, matrix, notes) over two parameters, each value
    written in with its note (an interval) under it."""
    cols = min(3, len(grids))
    with _figure(path, f"Final accuracy over {row_param} x {col_param} (- : no finished job)", -(-len(grids) // cols),
                 cols, width=4.2 * cols, height=3.6) as (fig, axes):
        for ax, (title, row_values, col_values, matrix, notes) in zip(axes, grids, strict=False):
            image = ax.imshow([_nan(row) for row in matrix], vmin=0.0, vmax=1.0, cmap=NO_VALUE_GREY, aspect="auto",
                              origin="lower")
            for r, row in enumerate(matrix):
                for c, value in enumerate(row):
                    # light text on the dark (low) end of viridis, dark text on the light end
                    colour = "black" if value is None or value >= 0.6 else "white"
                    text = "-" if value is None else f"{value:.2f}\n{notes[r][c]}".rstrip()
                    ax.text(c, r, text, ha="center", va="center", fontsize=8, color=colour)
            ax.set_xticks(range(len(col_values)), col_values)
            ax.set_yticks(range(len(row_values)), row_values)
            ax.set_xlabel(col_param)
            ax.set_ylabel(row_param)
            ax.set_title(title, fontsize=10)
            fig.colorbar(image, ax=ax, shrink=0.8, label="final accuracy")
        for ax in axes[len(grids):]:
            ax.set_visible(False)
    return path


def _nan(values: Sequence) -> list[float]:
    """None as NaN: matplotlib breaks a line (and a band) there, so a gap shows as a gap."""
    return [float("nan") if v is None else v for v in values]


def isolated(values: Sequence) -> list[int]:
    """The points with a value whose neighbours have none: a band cannot be drawn around them.

    >>> isolated([0.5, None, 0.2, 0.3, None]), isolated([0.1])
    ([0], [0])
    """
    known = [v is not None for v in values]
    return [i for i, here in enumerate(known)
            if here and not (i > 0 and known[i - 1]) and not (i + 1 < len(known) and known[i + 1])]


def plot_sweep_curves(accuracy: Sequence[tuple[str, Sequence[Series]]], length: Sequence[Series], path: Path,
                      title: str = "The sweep's jobs compared", reward: Sequence[Series] = (),
                      best: str | None = None) -> Path:
    """Jobs (or runs) overlaid on the global-step axis, one colour each: the accuracy panels (`series.
    accuracy_panels`) with a band for the 95% interval, then training reward and mean length; the `best` job's
    lines (its label) drawn thicker."""
    panels = [(name, lines, True) for name, lines in accuracy if lines]
    panels += [("training reward per step (weighted total)", reward, False)] if reward else []
    panels += [("training mean completion length per step (tokens)", length, False)] if length else []
    labels = list(dict.fromkeys(s.label for _, lines, _ in panels for s in lines))
    # colour, dash and marker all differ per job: jobs with equal values (common early on) stay visible
    styles = {label: {"color": f"C{i}", "linestyle": ("-", "--", ":", "-.")[i % 4], "marker": "os^Dv"[i % 5]}
              for i, label in enumerate(labels)}
    with _figure(path, title, len(panels), height=3.6 if len(panels) < 4 else 2.8, steps=True) as (_, axes):
        for ax, (panel_title, lines, is_accuracy) in zip(axes, panels, strict=True):
            for series in lines:
                style = styles[series.label] if is_accuracy else {**styles[series.label], "marker": None}
                width = (1.8 if is_accuracy else 1.2) * (2.0 if series.label == best else 1.0)
                ax.plot(series.x, _nan(series.y), label=series.label, linewidth=width,
                        markersize=max(4.0, 9.0 - 1.5 * labels.index(series.label)), **style)
                if series.low is not None and series.high is not None:
                    ax.fill_between(series.x, _nan(series.low), _nan(series.high), color=style["color"], alpha=0.12,
                                    linewidth=0)
                    # a point validated alone gets no band: its bar instead
                    alone = [i for i in isolated(series.y) if series.low[i] is not None and series.high[i] is not None]
                    if alone:
                        _bars(ax, [y if i in alone else None for i, y in enumerate(series.y)], series.low,
                              series.high, 0.0, linestyle="none", color=style["color"], alpha=0.6)
            if is_accuracy:
                ax.set_ylim(*UNIT_RANGE)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            _finish(ax, panel_title)
    return path


def _draw_boxes(ax, panel: StageBoxes) -> None:
    width = 0.7 / max(1, len(panel.groups))
    for k, (group, per_stage) in enumerate(panel.groups.items()):
        shift = width * (k - (len(panel.groups) - 1) / 2)
        filled = [(i, values) for i, values in enumerate(per_stage) if values]
        if not filled:
            continue
        color = level_style(group)["color"] if group else "C0"
        ax.boxplot([values for _, values in filled], positions=[i + shift for i, _ in filled], widths=width * 0.85,
                   patch_artist=True, manage_ticks=False, medianprops={"color": "black"},
                   boxprops={"facecolor": color, "alpha": 0.55}, flierprops={"markersize": 3})
        if group:  # a legend entry per subset; boxplot's artists carry no label
            ax.plot([], [], marker="s", linestyle="none", color=color, label=group)
    lows = [(i, low) for i, (low, _) in enumerate(panel.extremes) if low is not None]
    highs = [(i, high) for i, (_, high) in enumerate(panel.extremes) if high is not None]
    for points, name, marker in ((lows, "shortest", "v"), (highs, "longest", "^")):
        if points:
            ax.plot([i for i, _ in points], [v for _, v in points], marker=marker, color="0.3", linestyle="none",
                    label=f"{name} completion of the stage")


def plot_stage_boxes(panels: Sequence[StageBoxes], title: str, path: Path) -> Path:
    """Stacked panels, each a box per stage (per group side by side), its n under each stage's name."""
    with _figure(path, title, len(panels), height=3.4) as (_, axes):
        for ax, panel in zip(axes, panels, strict=True):
            _draw_boxes(ax, panel)
            counts = [sum(len(values[i]) for values in panel.groups.values()) for i in range(len(panel.stages))]
            ax.set_xticks(range(len(panel.stages)), [f"{name}\nn={n}" for name, n in zip(panel.stages, counts,
                                                                                          strict=True)],
                          rotation=30 if len(panel.stages) > 8 else 0, fontsize=8)
            ax.set_xlim(-0.6, len(panel.stages) - 0.4)
            ax.set_ylabel(panel.ylabel)
            _finish(ax, panel.title, grid="y")
    return path
