"""The blocks a report is made of, its cells (rates with intervals, changes marked), rendered to Markdown, and
report.md rendered to HTML. Everything read from a run folder is untrusted: headings, cells, captions and completions
are plain text, escaped here; a `Text` block is Markdown, its author escapes what it interpolates (`md_escape`, `code`).
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt

from core.stats import change, rate_text
from curriculum.tasks.base import TaskReport
from eval.report.series import StageGrid


@dataclass(frozen=True)
class Heading:
    text: str  # plain text
    level: int = 2


@dataclass(frozen=True)
class Text:
    text: str
    note: bool = False  # something missing or skipped, shown in italics


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]
    left: int = 0  # the leading columns of words, aligned left (the page aligns numbers right, its first column left)


@dataclass(frozen=True)
class Image:
    path: Path  # a PNG the report drew into its own folder
    caption: str  # plain text


@dataclass(frozen=True)
class Completion:
    text: str  # a model's text, verbatim: folded in the HTML when long


@dataclass(frozen=True)
class Folded:
    summary: str  # plain text on the fold
    text: str  # verbatim (a prompt, a puzzle), always folded in the HTML


# A completion longer than this (lines or characters) is folded in the HTML page.
FOLD_LINES, FOLD_CHARS = 12, 1200


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


def short_number(text) -> str:
    """A decimal with more than 3 significant digits (an Optuna trial's) rounded to 3; anything else as written.

    >>> short_number("0.3745401188473625"), short_number("2.0"), short_number("1e-05"), short_number("128")
    ('0.375', '2.0', '1e-05', '128')
    >>> short_number("kk_ladder"), short_number(None), short_number("1234.5678")
    ('kk_ladder', 'None', '1.23e+03')
    """
    text = str(text)
    try:
        value = float(text)
    except ValueError:
        return text
    if re.fullmatch(r"[+-]?\d+", text.strip()) or value != value or value in (float("inf"), float("-inf")):
        return text
    rounded = f"{value:.3g}"
    return rounded if float(rounded) != value else text


# Markdown untrusted text could start anywhere in a line (emphasis, code, raw HTML, entities, pipes, links; `_`
# only where it can open or close emphasis, not in key_names), and what starts a block at a line's start.
_INLINE = re.compile(r"[\\`*<>&|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|\](?=[(\[:]|$)")
# ... in text something safe follows (a cell's "|", a heading's line end): a final "]" cannot meet a "("
_INLINE_CLOSED = re.compile(_INLINE.pattern.replace("|$)", ")"))
_BLOCK_START = re.compile(r"^(?:[#>]|[-+](?=\s))|^\d+([.)])(?=\s|$)")


def md_escape(text, *, line_start: bool = True, inline: re.Pattern = _INLINE) -> str:
    r"""Untrusted text made inert in Markdown, on one line: no link, image, emphasis, code, raw HTML or cell break,
    nor a heading or list at a line's start (`line_start`); only a `]` that could open a link is escaped.

    >>> md_escape("![x](/etc/passwd) <script>*a* b_c_d</script> | `x`")
    '![x\\](/etc/passwd) \\<script\\>\\*a\\* b_c_d\\</script\\> \\| \\`x\\`'
    >>> md_escape("# heading\n1. item"), md_escape("1. item"), md_escape("0.5"), md_escape("-")
    ('\\# heading 1. item', '1\\. item', '0.5', '-')
    """
    text = inline.sub(lambda m: "\\" + m.group(), " ".join(str(text).splitlines()))
    if not line_start:
        return text
    # escape the marker's punctuation: a backslash before a digit would show as a backslash
    return _BLOCK_START.sub(lambda m: m.group()[:-1] + "\\" + m.group()[-1] if m.group(1) else "\\" + m.group(),
                            text)


def _cell(text) -> str:
    r"""A table cell: inline (no block can start there) and closed by its "|" (a final "]" meets no "(").

    >>> _cell("[2, 3]"), _cell("[x](y)")
    ('[2, 3]', '[x\\](y)')
    """
    return md_escape(text, line_start=False, inline=_INLINE_CLOSED)


def code(text) -> str:
    """`text` as an inline code span, whatever backticks it holds.

    >>> code("a`b"), code("run")
    ('``a`b``', '`run`')
    """
    text = " ".join(str(text).splitlines())
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def fenced(text: str, info: str = "") -> list[str]:
    r"""`text` as a fenced code block whose fence no backtick run inside it can close.

    >>> fenced("a\n```\nb", "completion")
    ['````completion', 'a', '```', 'b', '````']
    """
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=2)
    fence = "`" * (longest + 1)
    return [fence + info, *text.splitlines(), fence]


def info_words(text) -> str:
    r"""Text as a fence's info string can carry it: one line of words, no backtick.

    >>> info_words("the `puzzle`\n<b>")
    'the puzzle b'
    """
    return " ".join(re.sub(r"[^\w.,:()+-]+", " ", str(text)).split())


def slug(text: str) -> str:
    """A heading's anchor as GitHub makes it, so report.md's contents link there too.

    >>> slug("Validation accuracy per subset"), slug("KL (beta > 0) · per stage")
    ('validation-accuracy-per-subset', 'kl-beta--0--per-stage')
    """
    return re.sub(r"[^\w\- ]", "", " ".join(str(text).split("\n")).strip().lower()).replace(" ", "-")


class Anchors:
    """A page's heading anchors in order: a repeated slug suffixed -1, -2, ... (GitHub's rule)."""

    def __init__(self):
        self.seen: dict[str, int] = {}

    def __call__(self, text: str) -> str:
        base = slug(text)
        count = self.seen.get(base, 0)
        self.seen[base] = count + 1
        return base if count == 0 else f"{base}-{count}"


# A contents entry's text: link text, so a bracket from a run folder must not close it either
_LINK_TEXT = re.compile(_INLINE.pattern + r"|[\[\]]")


def contents(title: str, blocks: Sequence) -> list[str]:
    """A link to each level-2 heading, when there are two or more."""
    anchors = Anchors()
    anchors(title)
    headings = [(block, anchors(block.text)) for block in blocks if isinstance(block, Heading)]  # every one counts
    sections = [(block.text, anchor) for block, anchor in headings if block.level == 2]
    if len(sections) < 2:
        return []
    return ["**Contents**", "",
            *(f"- [{md_escape(text, line_start=False, inline=_LINK_TEXT)}](#{anchor})" for text, anchor in sections),
            ""]


def to_markdown(title: str, blocks: Sequence) -> str:
    """Markdown with images linked relative to the report directory, its contents at the top."""
    out = [f"# {md_escape(title, inline=_INLINE_CLOSED)}", "", *contents(title, blocks)]
    for block in blocks:
        if isinstance(block, Heading):
            out += [f"{'#' * block.level} {md_escape(block.text, inline=_INLINE_CLOSED)}", ""]
        elif isinstance(block, Text):
            out += [f"_{block.text}_" if block.note else block.text, ""]
        elif isinstance(block, Table):
            out += ["| " + " | ".join(map(_cell, block.headers)) + " |",
                    "|" + ":---|" * block.left + "---|" * (len(block.headers) - block.left),
                    *("| " + " | ".join(map(_cell, row)) + " |" for row in block.rows), ""]
        elif isinstance(block, Image):
            # the caption again as its own paragraph: alt text is hidden
            caption = md_escape(block.caption)
            out += [f"![{caption}]({block.path.name})", "", f"Figure: {caption}.", ""]
        elif isinstance(block, Completion):
            out += [*fenced(block.text, "completion"), ""]
        elif isinstance(block, Folded):
            out += [*fenced(block.text, f"folded {info_words(block.summary)}"), ""]
    return "\n".join(out)


# a note: a paragraph all emphasis; the contents: the list after the title, in two columns when long
STYLE = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f2f2f2}td:first-child{text-align:left}p>em:only-child{color:#8a5a00}
img{max-width:100%}code{background:#f4f4f4;padding:0 3px}
pre{background:#f7f7f7;padding:6px;white-space:pre-wrap;overflow-wrap:anywhere}summary{cursor:pointer;color:#555}
h1+p+ul{font-size:0.92em}h1+p+ul:has(li:nth-child(9)){columns:2;column-gap:2em}"""


def _embedded_image(self, tokens, idx, options, env) -> str:
    """An image the report wrote, embedded as a data URI; any other image reference is shown as text, never read."""
    token = tokens[idx]
    caption = self.renderInlineAsText(token.children, options, env)
    src = token.attrGet("src") or ""
    if src not in env["images"]:
        return html.escape(f"[image not embedded: {caption} ({src})]")
    data = base64.b64encode((env["image_dir"] / src).read_bytes()).decode("ascii")
    caption = html.escape(caption, quote=True)
    return f"<img alt='{caption}' title='{caption}' src='data:image/png;base64,{data}'>"


def _folded_completion(self, tokens, idx, options, env) -> str:
    """A completion escaped, inside <details> when long; a `Folded` block always inside <details>."""
    token = tokens[idx]
    kind, _, summary = token.info.strip().partition(" ")
    if kind not in ("completion", "folded"):
        return self.fence(tokens, idx, options, env)
    text = token.content
    body = f"<pre>{html.escape(text)}</pre>"
    if kind == "folded":
        return f"<details><summary>{html.escape(summary)}</summary>{body}</details>\n"
    lines = text.count("\n")
    if lines <= FOLD_LINES and len(text) <= FOLD_CHARS:
        return body + "\n"
    return f"<details><summary>the completion: {lines} lines, {len(text)} characters</summary>{body}</details>\n"


def _heading_with_anchor(self, tokens, idx, options, env) -> str:
    """A heading with the id `contents` links to."""
    tokens[idx].attrSet("id", env["anchors"](self.renderInlineAsText(tokens[idx + 1].children, options, env)))
    return self.renderToken(tokens, idx, options, env)


def to_html(title: str, markdown: str, image_dir: Path, images: Sequence[str] = ()) -> str:
    """One self-contained page: raw HTML escaped, long completions folded, only `images` (in `image_dir`) embedded."""
    renderer = MarkdownIt("commonmark", {"html": False}).enable("table")
    renderer.add_render_rule("image", _embedded_image)
    renderer.add_render_rule("fence", _folded_completion)
    renderer.add_render_rule("heading_open", _heading_with_anchor)
    own = {name for name in images if Path(name).name == name and (image_dir / name).is_file()}
    body = renderer.render(markdown, {"image_dir": image_dir, "images": own, "anchors": Anchors()})
    return (f"<!doctype html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head>\n<body>\n{body}</body></html>\n")


# --- validation tables: stage rows x subset columns ---------------------------------------------------

UP, DOWN = "▲", "▼"


def change_note(report: TaskReport) -> str:
    """How a rate cell reads and when a change is marked, in the words of the run's task.

    >>> change_note(TaskReport()).startswith("Each rate: its value, its 95% Wilson interval [low, high] and n, "
    ...                                      "the distinct problems it counts. ▲")
    True
    """
    record, pool = md_escape(report.record), f" ({md_escape(report.pool_note)})" if report.pool_note else ""
    return (f"Each rate: its value, its 95% Wilson interval [low, high] and n, the distinct {record}s it "
            f"counts{pool}. {UP} / {DOWN}: up / down from the last validated stage above it, beyond chance: "
            "Newcombe's 95% interval for the difference (built from the two Wilson intervals) excludes 0. An "
            f"unmarked change is within noise. Every stage is validated on the same {record}s, so a paired "
            "test would be sharper: this one marks less rather than more.")


def marked(value: float | None, n: int | None, before: tuple[float | None, int | None] = (None, None)) -> str:
    """A rate with its interval and n, "▲" / "▼" where it is up / down from `before` (value, n) beyond chance."""
    return f"{rate_text(value, n)} {({1: UP, -1: DOWN}).get(change(*before, value, n), '')}".rstrip()


def rate_cells(grid: StageGrid, level: str) -> list[str]:
    """One subset's column: each stage's rate, marked where it changed from the last stage above with one.

    >>> rate_cells(StageGrid(list("abcd"), ["2ppl"], {"2ppl": [0.1, None, 0.6, 0.55]}, {"2ppl": [100, None, 100, 100]}),
    ...            "2ppl")
    ['0.100 [0.06, 0.17] n=100', '-', '0.600 [0.50, 0.69] n=100 ▲', '0.550 [0.45, 0.64] n=100']
    """
    cells, last = [], (None, None)
    for value, n in zip(grid.values[level], grid.trials.get(level) or [None] * len(grid.stages), strict=True):
        cells.append(marked(value, n, last))
        last = last if value is None else (value, n)
    return cells


def grid_table(grid: StageGrid, *, rate: bool = True) -> Table:
    """Stage rows x subset columns (the transpose of the plot: one row per stage reads better)."""
    columns = {level: rate_cells(grid, level) if rate else [fmt(v, 1) for v in grid.values[level]]
               for level in grid.levels}
    rows = [[stage, *(columns[level][i] for level in grid.levels)] for i, stage in enumerate(grid.stages)]
    return Table(["after stage", *grid.levels], rows)
