"""The blocks a report is made of (heading, text, table, image) and its table-cell format.

`eval.report` renders a list of them twice, as Markdown and as HTML, so the two never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Heading:
    text: str


@dataclass(frozen=True)
class Text:
    text: str
    note: bool = False  # something missing or skipped, shown in italics


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class Image:
    path: Path
    caption: str


def fmt(value, digits: int = 3) -> str:
    """A table cell: '-' for missing, numbers rounded, anything else as text.

    >>> fmt(None), fmt(0.12345), fmt(16.0, 1), fmt(3), fmt("done")
    ('-', '0.123', '16.0', '3', 'done')
    """
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)
