"""Figures of a distribution per stage: one box per stage (and subset), stages along the x axis.

Drawn like the other figures (`eval.report.plots`): the object API on an Agg canvas, mathtext off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from eval.report.plots import _figure, _legend, _save, level_style, literal_text


@dataclass(frozen=True)
class StageBoxes:
    """One panel: per group (a subset; "" for one group of everything) the values of each stage, in `stages` order
    ([] where the stage has none); `extremes`: per stage a (lowest, highest) drawn as triangles on its box."""

    title: str
    ylabel: str
    stages: Sequence[str]
    groups: dict[str, list[list[float]]]
    extremes: Sequence[tuple[float | None, float | None]] = ()


def _draw_boxes(ax, panel: StageBoxes) -> None:
    width = 0.7 / max(1, len(panel.groups))
    for k, (group, per_stage) in enumerate(panel.groups.items()):
        shift = width * (k - (len(panel.groups) - 1) / 2)
        filled = [(i, values) for i, values in enumerate(per_stage) if values]
        if not filled:
            continue
        style = level_style(group) if group else {"color": "C0"}
        color = style["color"]
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
        ax.set_title(panel.title, fontsize=10)
        ax.set_ylabel(panel.ylabel)
        ax.grid(alpha=0.3, axis="y")
        _legend(ax)
    fig.suptitle(title, fontsize=12)
    return _save(fig, path)
