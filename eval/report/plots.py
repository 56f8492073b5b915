"""The report's figures: series from `eval.report.series` -> PNG files.

Built with the object API on an Agg canvas, never pyplot: no display is needed and no figure outlives its save.
Labels come from run folders, so mathtext is off: "$x^{$" is drawn as text instead of failing the report.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
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


def literal_text(draw):
    """Run a plot function with mathtext off: text from a run folder is drawn as written, never parsed."""
    @functools.wraps(draw)
    def without_mathtext(*args, **kwargs):
        with rc_context({"text.parse_math": False}):
            return draw(*args, **kwargs)

    return without_mathtext


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


def _figure(rows: int, cols: int = 1, *, width: float = 10.0, height: float = 3.2):
    """A figure with a rows x cols grid of axes (a flat list), laid out so labels never clip."""
    fig = Figure(figsize=(width, height * rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, [ax for row in axes for ax in row]


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def _finish(ax, title: str, fontsize: int = 10, grid: str = "both") -> None:
    """Title, grid and a legend outside the axes on the right, where it hides no data; none for a single line,
    which the title already names."""
    ax.set_title(title, fontsize=fontsize)
    ax.grid(alpha=0.3, axis=grid)
    if len(ax.get_legend_handles_labels()[0]) > 1:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


def _unit_range(ax) -> None:
    ax.set_ylim(-0.03, 1.03)


def mark_stages(ax, boundaries: Sequence[Boundary]) -> None:
    """A dashed vertical line where each stage starts, labelled with its level just right of it at the top."""
    for boundary in boundaries:
        ax.axvline(boundary.step, color="0.45", linestyle="--", linewidth=0.9, zorder=0)
        ax.annotate(boundary.label, xy=(boundary.step, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(2, -3), textcoords="offset points", rotation=90, ha="left", va="top",
                    fontsize=8, color="0.25")


def mark_events(ax, events: Sequence[Event]) -> None:
    """A dotted line and a marker for each event; one legend entry per kind."""
    labelled = set()
    for event in events:
        color, marker, name, height = EVENT_STYLE[event.kind]
        ax.axvline(event.step, color=color, linestyle=":", linewidth=1.2, zorder=1)
        ax.plot([event.step], [height], marker=marker, color=color, markersize=8, linestyle="none",
                transform=ax.get_xaxis_transform(), label=None if event.kind in labelled else name)
        labelled.add(event.kind)


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
        _unit_range(ax)
        ax.set_yticks([0.0, 0.25, 0.5, 0.75, 1.0])
    low, high = ax.get_ylim()
    ax.set_ylim(low, high + 0.2 * (high - low))  # headroom: the stage labels along the top sit on no data
    mark_stages(ax, boundaries)
    mark_events(ax, panel.events)
    ax.set_ylabel(panel.ylabel)
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))  # a learning rate as 1e-4, not 0.000100
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    _finish(ax, panel.title)


@literal_text
def plot_step_panels(panels: Sequence[Panel], boundaries: Sequence[Boundary], title: str, path: Path) -> Path:
    """Stacked panels sharing the global-step axis, each with the stage boundaries marked."""
    fig, axes = _figure(len(panels), height=3.2 if len(panels) < 3 else 2.6)
    for ax, panel in zip(axes, panels, strict=True):
        _draw_panel(ax, panel, boundaries)
        ax.sharex(axes[0])
    axes[-1].set_xlabel(STEP_LABEL)
    fig.suptitle(title, fontsize=12)
    return _save(fig, path)


def chance_text(value: float) -> str:
    """A chance accuracy as it is written: a unit fraction as one, else its value.

    >>> chance_text(0.25), chance_text(0.3)
    ('1/4', '0.3')
    """
    inverse = 1 / value if value > 0 else 0
    return f"1/{round(inverse)}" if inverse >= 2 and abs(inverse - round(inverse)) < 1e-9 else f"{value:.3g}"


@literal_text
def plot_stage_grid(grid: StageGrid, ylabel: str, title: str, path: Path, *, chance: Mapping[str, float],
                    xlabel: str = "validated after stage (baseline = before training)") -> Path:
    """A rate on 0..1: one line per subset across stages (baseline first); `chance`: each subset's accuracy by
    chance (level -> share) as a dotted line in its colour."""
    fig, (ax,) = _figure(1, height=4.0)
    positions = list(range(len(grid.stages)))
    for level in grid.levels:
        if level in chance:
            ax.axhline(chance[level], color=level_style(level)["color"], linestyle=":", linewidth=1.2,
                       label=f"chance {level} ({chance_text(chance[level])})", zorder=0)
    spread = 0.3 / max(1, len(grid.levels) - 1) if len(grid.levels) > 1 else 0.0
    for k, level in enumerate(grid.levels):
        low, high = intervals(grid.values[level], grid.trials.get(level) or [None] * len(positions))
        _bars(ax, grid.values[level], low, high, spread * (k - (len(grid.levels) - 1) / 2), label=level,
              **level_style(level))
    ax.set_xticks(positions, grid.stages, rotation=30 if len(grid.stages) > 8 else 0)
    ax.set_xlim(-0.3, max(positions, default=0) + 0.3)
    _unit_range(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    _finish(ax, title, 12)
    return _save(fig, path)


@literal_text
def plot_sweep_lines(lines: Sequence[Series], param: str, path: Path, *, connect: bool = True) -> Path:
    """Final accuracy against one swept parameter (or runs: `connect` False, categories are not a scale):
    the mean in bold black, one line per subset, each point with its bar."""
    fig, (ax,) = _figure(1, height=4.0)
    positions = list(range(len(lines[0].x))) if lines else []
    spread = 0.25 / max(1, len(lines) - 1)
    for k, series in enumerate(lines):
        style = {"color": "black", "marker": "o", "linewidth": 2.5} if series.label == "mean" else \
            level_style(series.label)
        if not connect:
            style["linestyle"] = "none"
        none = [None] * len(positions)
        _bars(ax, series.y, series.low or none, series.high or none,
              spread * (k - (len(lines) - 1) / 2) if len(lines) > 1 else 0.0, label=series.label, **style)
    if lines:
        ax.set_xticks(positions, lines[0].x)
        ax.set_xlim(-0.3, len(positions) - 0.7)
    for x in positions:  # a value that was swept but has no finished job (failed or still running)
        if all(series.y[x] is None for series in lines):
            ax.text(x, 0.5, "not finished", rotation=90, ha="center", va="center", fontsize=8, color="0.4")
    _unit_range(ax)
    ax.set_xlabel(param)
    ax.set_ylabel("final accuracy (after the last stage)")
    _finish(ax, f"Final accuracy vs {param}", 12)
    return _save(fig, path)


@literal_text
def plot_sweep_heatmaps(grids: Sequence[tuple[str, list, list, list, list]], row_param: str, col_param: str,
                        path: Path) -> Path:
    """One heatmap per (title, row values, column values, matrix, notes) over two parameters, each value
    written in with its note (an interval) under it."""
    cols = min(3, len(grids))
    rows = -(-len(grids) // cols)
    fig, axes = _figure(rows, cols, width=4.2 * cols, height=3.6)
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
    fig.suptitle(f"Final accuracy over {row_param} x {col_param} (- : no finished job)", fontsize=12)
    return _save(fig, path)


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


@literal_text
def plot_sweep_curves(accuracy: Sequence[tuple[str, Sequence[Series]]], length: Sequence[Series], path: Path,
                      title: str = "The sweep's jobs compared", reward: Sequence[Series] = (),
                      best: str | None = None) -> Path:
    """Jobs (or runs) overlaid on the global-step axis, one colour each: the accuracy panels (`series.
    accuracy_panels`) with a band for the 95% interval, then training reward and mean length; the `best` job's
    lines (its label) drawn thicker."""
    panels = [(name, lines, True) for name, lines in accuracy if lines]
    panels += [("training reward per step (weighted total)", reward, False)] if reward else []
    panels += [("training mean completion length per step (tokens)", length, False)] if length else []
    fig, axes = _figure(len(panels), height=3.6 if len(panels) < 4 else 2.8)
    labels = list(dict.fromkeys(s.label for _, lines, _ in panels for s in lines))
    # colour, dash and marker all differ per job: jobs with equal values (common early on) stay visible
    styles = {label: {"color": f"C{i}", "linestyle": ("-", "--", ":", "-.")[i % 4], "marker": "os^Dv"[i % 5]}
              for i, label in enumerate(labels)}
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
            _unit_range(ax)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        _finish(ax, panel_title)
        ax.sharex(axes[0])
    axes[-1].set_xlabel(STEP_LABEL)
    fig.suptitle(title, fontsize=12)
    return _save(fig, path)


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


@literal_text
def plot_stage_boxes(panels: Sequence[StageBoxes], title: str, path: Path) -> Path:
    """Stacked panels, each a box per stage (per group side by side), its n under each stage's name."""
    fig, axes = _figure(len(panels), height=3.4)
    for ax, panel in zip(axes, panels, strict=True):
        _draw_boxes(ax, panel)
        counts = [sum(len(values[i]) for values in panel.groups.values()) for i in range(len(panel.stages))]
        ax.set_xticks(range(len(panel.stages)), [f"{name}\nn={n}" for name, n in zip(panel.stages, counts,
                                                                                      strict=True)],
                      rotation=30 if len(panel.stages) > 8 else 0, fontsize=8)
        ax.set_xlim(-0.6, len(panel.stages) - 0.4)
        ax.set_ylabel(panel.ylabel)
        _finish(ax, panel.title, grid="y")
    fig.suptitle(title, fontsize=12)
    return _save(fig, path)
