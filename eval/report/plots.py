"""The report's figures: series from `eval.report.series` -> PNG files.

Figures are built with the object API (`matplotlib.figure.Figure` on an Agg canvas), never pyplot:
no display is needed, and no figure lives on in pyplot's global registry after it is saved. Labels
come from run folders (stage names, parameter values): mathtext is off, so "$x^{$" is drawn as
text instead of failing the report.
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

from eval.report.adaptive import GUARD, PROMOTION, REFRESH, Event
from eval.report.series import Boundary, Series, StageGrid, intervals

# Subsets keep one colour and marker in every figure, by the first number of their level (2ppl and 2steps are
# always the green circle). The
# colours (ColorBrewer Dark2) are not the blue of the per-step training lines; the markers shrink
# with the level's number so that subsets with equal values (common early in training) stay visible on top
# of each other.
LEVEL_STYLE = {2: ("#1b9e77", "o"), 3: ("#d95f02", "s"), 4: ("#7570b3", "D"), 5: ("#e7298a", "^"),
             6: ("#66a61e", "v"), 7: ("#a6761d", "P"), 8: ("#666666", "X")}
# Heatmap cells without a finished job are light grey, apart from every accuracy colour.
NO_VALUE_GREY = colormaps["viridis"].with_extremes(bad="0.88")
STEP_LABEL = "global step (optimizer steps, all stages)"


@dataclass(frozen=True)
class Panel:
    """One axes of a per-step figure: training lines, an optional min/max band, validation markers."""

    title: str
    ylabel: str
    lines: Sequence[Series]
    markers: Sequence[Series] = ()
    band: tuple[Series, Series] | None = None
    unit_range: bool = False  # a rate or share: fix the y axis to 0..1 so a flat line is not magnified
    events: Sequence[Event] = ()  # promotions and guard events, marked where they happened


def level_style(label: str) -> dict:
    """Plot keywords (colour, marker, marker size) of a subset by the first number of its level ("2ppl",
    "2steps": the green circle), the same in every figure."""
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


def _figure(rows: int, cols: int = 1, *, width: float = 10.0, height: float = 3.2):
    """A figure with a rows x cols grid of axes (always a flat list), laid out so labels never clip."""
    fig = Figure(figsize=(width, height * rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, [ax for row in axes for ax in row]


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def mark_stages(ax, boundaries: Sequence[Boundary]) -> None:
    """A dashed vertical line where each stage starts, labelled with its level just right of it at the top."""
    for boundary in boundaries:
        ax.axvline(boundary.step, color="0.45", linestyle="--", linewidth=0.9, zorder=0)
        ax.annotate(boundary.label, xy=(boundary.step, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(2, -3), textcoords="offset points", rotation=90, ha="left", va="top",
                    fontsize=8, color="0.25")


# (colour, marker, legend name, height in the axes) of each kind of event. Promotion: a green upward triangle (the
# stage passed); guard event: a red cross (something collapsed); a reference refresh: a blue diamond at the foot of
# the axes, where the KL it resets falls (the stage labels take the top).
EVENT_STYLE = {PROMOTION: ("#1a9641", "^", "promoted on skill", 0.97), GUARD: ("#d7191c", "X", "collapse guard", 0.97),
               REFRESH: ("#2c7bb6", "D", "reference refreshed", 0.04)}


def mark_events(ax, events: Sequence[Event]) -> None:
    """A dotted line and a marker for each event; one legend entry per kind."""
    labelled = set()
    for event in events:
        color, marker, name, height = EVENT_STYLE[event.kind]
        ax.axvline(event.step, color=color, linestyle=":", linewidth=1.2, zorder=1)
        ax.plot([event.step], [height], marker=marker, color=color, markersize=8, linestyle="none",
                transform=ax.get_xaxis_transform(), label=None if event.kind in labelled else name)
        labelled.add(event.kind)


def _headroom(ax, share: float = 0.2) -> None:
    """Raise the top of the y axis so the stage labels along the top do not sit on the data."""
    low, high = ax.get_ylim()
    ax.set_ylim(low, high + share * (high - low))


def _legend(ax) -> None:
    """Legend outside the axes on the right, where it cannot hide data or the stage labels; none for
    a single line, which the panel title already names."""
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
        ax.set_ylim(-0.03, 1.03)
        ax.set_yticks([0.0, 0.25, 0.5, 0.75, 1.0])
    _headroom(ax)
    mark_stages(ax, boundaries)
    mark_events(ax, panel.events)
    ax.set_title(panel.title, fontsize=10)
    ax.set_ylabel(panel.ylabel)
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))  # a learning rate as 1e-4, not 0.000100
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    _legend(ax)


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
def plot_stage_grid(grid: StageGrid, ylabel: str, title: str, path: Path, *, unit_range: bool,
                    chance: Mapping[str, float] | None = None,
                    xlabel: str = "validated after stage (baseline = before training)") -> Path:
    """One line per subset across stages (baseline first), the x axis labelled with stage names; `chance`: each
    subset's accuracy by chance (level -> share; the task's `TaskReport.chance`) as a dotted line in its colour."""
    fig, (ax,) = _figure(1, height=4.0)
    positions = list(range(len(grid.stages)))
    for level in grid.levels:
        if level in (chance or {}):
            ax.axhline(chance[level], color=level_style(level)["color"], linestyle=":", linewidth=1.2,
                       label=f"chance {level} ({chance_text(chance[level])})", zorder=0)
    # subsets side by side around each stage's tick, so their 95% interval bars do not hide each other
    spread = 0.3 / max(1, len(grid.levels) - 1) if len(grid.levels) > 1 else 0.0
    for k, level in enumerate(grid.levels):
        low, high = intervals(grid.values[level], grid.trials.get(level) or [None] * len(positions))
        shift = spread * (k - (len(grid.levels) - 1) / 2)
        points = [(x + shift, y, lo, hi) for x, y, lo, hi in zip(positions, grid.values[level], low, high, strict=True)
                  if y is not None]
        ys = [p[1] for p in points]
        ax.errorbar([p[0] for p in points], ys, yerr=error_bars(ys, [p[2] for p in points], [p[3] for p in points]),
                    label=level, capsize=3, **level_style(level))
    ax.set_xticks(positions, grid.stages, rotation=30 if len(grid.stages) > 8 else 0)
    ax.set_xlim(-0.3, max(positions, default=0) + 0.3)
    if unit_range:
        ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=12)
    ax.grid(alpha=0.3)
    _legend(ax)
    return _save(fig, path)


@literal_text
def plot_sweep_lines(lines: Sequence[Series], param: str, path: Path, *, connect: bool = True) -> Path:
    """Final accuracy against one swept parameter (or runs: `connect` False, categories are not a scale):
    the mean in bold black, one line per subset, each point with its bar."""
    fig, (ax,) = _figure(1, height=4.0)
    positions = list(range(len(lines[0].x))) if lines else []
    spread = 0.25 / max(1, len(lines) - 1)
    for k, series in enumerate(lines):
        shift = spread * (k - (len(lines) - 1) / 2) if len(lines) > 1 else 0.0  # bars side by side
        low, high = series.low or [None] * len(positions), series.high or [None] * len(positions)
        points = [(x + shift, y, lo, hi) for x, y, lo, hi in zip(positions, series.y, low, high, strict=True)
                  if y is not None]
        ys = [p[1] for p in points]
        is_mean = series.label == "mean"
        style = {"color": "black", "marker": "o", "linewidth": 2.5} if is_mean else level_style(series.label)
        if not connect:
            style["linestyle"] = "none"
        ax.errorbar([p[0] for p in points], ys, yerr=error_bars(ys, [p[2] for p in points], [p[3] for p in points]),
                    label=series.label, capsize=3, **style)
    if lines:
        ax.set_xticks(positions, lines[0].x)
        ax.set_xlim(-0.3, len(positions) - 0.7)
    for x in positions:  # a value that was swept but has no finished job (failed or still running)
        if all(series.y[x] is None for series in lines):
            ax.text(x, 0.5, "not finished", rotation=90, ha="center", va="center", fontsize=8, color="0.4")
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel(param)
    ax.set_ylabel("final accuracy (after the last stage)")
    ax.set_title(f"Final accuracy vs {param}", fontsize=12)
    ax.grid(alpha=0.3)
    _legend(ax)
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
        masked = [[float("nan") if v is None else v for v in row] for row in matrix]
        image = ax.imshow(masked, vmin=0.0, vmax=1.0, cmap=NO_VALUE_GREY, aspect="auto", origin="lower")
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


# What the accuracy panels of the sweep's and the comparison's curves show, said under them.
CURVES_NOTE = ("accuracy after each stage (band: its 95% interval), the mean over the subsets validated at every "
               "point of every curve, else each subset in its own panel, broken where a validation left it out")


def isolated(values: Sequence) -> list[int]:
    """The points with a value whose neighbours have none: a band cannot be drawn around them.

    >>> isolated([0.5, None, 0.2, 0.3, None]), isolated([0.1])
    ([0], [0])
    """
    known = [v is not None for v in values]
    return [i for i, here in enumerate(known)
            if here and not (i > 0 and known[i - 1]) and not (i + 1 < len(known) and known[i + 1])]


def _bar_isolated(ax, series: Series, color: str) -> None:
    """A 95% interval bar on each isolated point of `series` (a subset validated there alone)."""
    points = [i for i in isolated(series.y) if series.low[i] is not None and series.high[i] is not None]
    if points:
        ys = [series.y[i] for i in points]
        ax.errorbar([series.x[i] for i in points], ys, linestyle="none", color=color, capsize=3, alpha=0.6,
                    yerr=error_bars(ys, [series.low[i] for i in points], [series.high[i] for i in points]))


@literal_text
def plot_sweep_curves(accuracy: Sequence[tuple[str, Sequence[Series]]], length: Sequence[Series], path: Path,
                      title: str = "The sweep's jobs compared", reward: Sequence[Series] = (),
                      best: str | None = None) -> Path:
    """Jobs (or runs) overlaid: each accuracy panel (title, one curve per job: the mean over shared subsets, or one
    subset with its gaps; `series.accuracy_panels`) with markers at stage ends and a band for the 95% interval,
    then training reward and mean length per step; one colour per job in every panel, on the global-step axis;
    the `best` job's lines (its label) drawn thicker."""
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
                _bar_isolated(ax, series, style["color"])
        if is_accuracy:
            ax.set_ylim(-0.03, 1.03)
        ax.set_title(panel_title, fontsize=10)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        _legend(ax)
        ax.sharex(axes[0])
    axes[-1].set_xlabel(STEP_LABEL)
    fig.suptitle(title, fontsize=12)
    return _save(fig, path)
