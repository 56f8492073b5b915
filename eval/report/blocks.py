"""The blocks a report is made of (heading, text, table, image), its table-cell format, its rendering.

A list of blocks is rendered once, as Markdown that points at the PNGs; the HTML page is that
Markdown rendered by markdown-it-py with the PNGs embedded, so report.md and report.html never disagree.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt


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


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(title: str, blocks: Sequence) -> str:
    """Markdown with images linked relative to the report directory."""
    out = [f"# {title}", ""]
    for block in blocks:
        if isinstance(block, Heading):
            out += [f"## {block.text}", ""]
        elif isinstance(block, Text):
            out += [f"_{block.text}_" if block.note else block.text, ""]
        elif isinstance(block, Table):
            out += ["| " + " | ".join(map(_md_cell, block.headers)) + " |",
                    "|" + "---|" * len(block.headers),
                    *("| " + " | ".join(map(_md_cell, row)) + " |" for row in block.rows), ""]
        elif isinstance(block, Image):
            # the caption again as text under the image, so both pages show it (alt text is hidden)
            out += [f"![{block.caption}]({block.path.name})", f"Figure: {block.caption}.", ""]
    return "\n".join(out)


# A note is a paragraph that is all emphasis (`_..._` in the Markdown).
STYLE = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f2f2f2}td:first-child{text-align:left}p>em:only-child{color:#8a5a00}
img{max-width:100%}code{background:#f4f4f4;padding:0 3px}"""


def _embedded_image(self, tokens, idx, options, env) -> str:
    """An image as a base64 data URI read from the report directory: the page needs no other file."""
    token = tokens[idx]
    caption = html.escape(self.renderInlineAsText(token.children, options, env), quote=True)
    data = base64.b64encode((env["image_dir"] / token.attrGet("src")).read_bytes()).decode("ascii")
    return f"<img alt='{caption}' title='{caption}' src='data:image/png;base64,{data}'>"


def to_html(title: str, markdown: str, image_dir: Path) -> str:
    """One self-contained page from the report's Markdown: inline CSS, raw HTML escaped, images embedded."""
    renderer = MarkdownIt("commonmark", {"html": False}).enable("table")
    renderer.add_render_rule("image", _embedded_image)
    body = renderer.render(markdown, {"image_dir": image_dir})
    return (f"<!doctype html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head>\n<body>\n{body}</body></html>\n")
