"""The blocks a report is made of (heading, text, table, image, completion), its cell format, its rendering.

A list of blocks is rendered once, as Markdown that points at the PNGs; the HTML page is that
Markdown rendered by markdown-it-py with the PNGs embedded, so report.md and report.html never disagree.

Everything read from a run folder is untrusted (a stage name, a config value, a completion may hold
Markdown or HTML): headings, table cells, captions and completions are plain text, escaped here;
a `Text` block is Markdown, so its author escapes what it interpolates (`md_escape`, `code`). The
HTML page escapes raw HTML, and embeds only the images this report wrote into its own folder.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt


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
    """A model's text shown verbatim: a code block in Markdown, folded in the HTML when long."""

    text: str


@dataclass(frozen=True)
class Folded:
    """Text shown verbatim and always folded in the HTML (a prompt, a puzzle: read on demand), `summary` (plain
    text) on its fold; a fenced block in Markdown."""

    summary: str
    text: str


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
    """A value as a reader compares it: a decimal written with more than 3 significant digits (an Optuna trial's
    0.3745401188473625) rounded to 3; whole numbers, words and short decimals as written.

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


# Markdown that untrusted text could start anywhere in a line: emphasis, code spans, raw HTML and
# autolinks, entities, table pipes, links (`](`); `_` only where it can open or close emphasis (not
# inside a word, as in key_names). And what starts a block at a line's start: a heading, quote, list.
_INLINE = re.compile(r"[\\`*<>&|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|\](?=[(\[:]|$)")
# ... in text that something safe follows (a table cell's "|", a heading's line end): a closing "]" cannot meet a "("
_INLINE_CLOSED = re.compile(r"[\\`*<>&|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|\](?=[(\[:])")
_BLOCK_START = re.compile(r"^(?:[#>]|[-+](?=\s))|^\d+([.)])(?=\s|$)")


def md_escape(text, *, line_start: bool = True, inline: re.Pattern = _INLINE) -> str:
    r"""Text from a run folder (a name, a config value, an error), made inert in Markdown: one line,
    and no link, image, emphasis, code, raw HTML or table cell break can start from it; nor a
    heading or list when it starts a line (`line_start`).

    A link or image needs `](`, `][` or `]:`; escaping that `]` (and one that ends the text, which
    could meet a "(" of the text around it) is enough, so an interval such as "[0.20, 0.90]" stays
    readable in report.md.

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
    r"""A table cell: inline, so what only starts a block (a heading, a list) needs no escape there, and followed by
    its "|", so a "]" that ends it cannot meet a "(" (a config value "[2, 3]" stays as written).

    >>> _cell("[2, 3]"), _cell("[x](y)")
    ('[2, 3]', '[x\\](y)')
    """
    return md_escape(text, line_start=False, inline=_INLINE_CLOSED)


def code(text) -> str:
    """`text` as an inline code span, whatever backticks it holds (the fence is longer than any run of them).

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
    r"""Text as a fence's info string can carry it: one line of words, no backtick (it would end a backtick fence).

    >>> info_words("the `puzzle`\n<b>")
    'the puzzle b'
    """
    return " ".join(re.sub(r"[^\w.,:()+-]+", " ", str(text)).split())


def slug(text: str) -> str:
    """A heading's anchor as GitHub makes it (so report.md's contents link there too): lower case, punctuation
    dropped, each space a hyphen.

    >>> slug("Validation accuracy per subset"), slug("KL (beta > 0) · per stage")
    ('validation-accuracy-per-subset', 'kl-beta--0--per-stage')
    """
    return re.sub(r"[^\w\- ]", "", " ".join(str(text).split("\n")).strip().lower()).replace(" ", "-")


class Anchors:
    """The anchors of a page's headings in order: a heading's slug, suffixed -1, -2, ... when an earlier heading has
    it (GitHub's rule)."""

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
    """The page's table of contents: a link to each section (level-2 heading), when there are two or more."""
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
            # the caption again as text under the image, so both pages show it (alt text is hidden): a paragraph of
            # its own, else the HTML page runs it beside the image
            caption = md_escape(block.caption)
            out += [f"![{caption}]({block.path.name})", "", f"Figure: {caption}.", ""]
        elif isinstance(block, Completion):
            out += [*fenced(block.text, "completion"), ""]
        elif isinstance(block, Folded):
            out += [*fenced(block.text, f"folded {info_words(block.summary)}"), ""]
    return "\n".join(out)


# A note is a paragraph that is all emphasis (`_..._` in the Markdown); the contents are the list after the title, in
# two columns when long.
STYLE = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f2f2f2}td:first-child{text-align:left}p>em:only-child{color:#8a5a00}
img{max-width:100%}code{background:#f4f4f4;padding:0 3px}
pre{background:#f7f7f7;padding:6px;white-space:pre-wrap;overflow-wrap:anywhere}summary{cursor:pointer;color:#555}
h1+p+ul{font-size:0.92em}h1+p+ul:has(li:nth-child(9)){columns:2;column-gap:2em}"""


def _embedded_image(self, tokens, idx, options, env) -> str:
    """An image the report wrote, as a base64 data URI from its folder (the page needs no other file);
    any other image reference (from text a run folder supplied) is shown as text, never read."""
    token = tokens[idx]
    caption = self.renderInlineAsText(token.children, options, env)
    src = token.attrGet("src") or ""
    if src not in env["images"]:
        return html.escape(f"[image not embedded: {caption} ({src})]")
    data = base64.b64encode((env["image_dir"] / src).read_bytes()).decode("ascii")
    caption = html.escape(caption, quote=True)
    return f"<img alt='{caption}' title='{caption}' src='data:image/png;base64,{data}'>"


def _folded_completion(self, tokens, idx, options, env) -> str:
    """A completion block: escaped, and inside <details> when long, so the page stays readable; a folded block
    (`Folded`) always inside <details>."""
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
    """A heading with its id, as `contents` links to it (its text as read, so escapes do not count)."""
    tokens[idx].attrSet("id", env["anchors"](self.renderInlineAsText(tokens[idx + 1].children, options, env)))
    return self.renderToken(tokens, idx, options, env)


def to_html(title: str, markdown: str, image_dir: Path, images: Sequence[str] = ()) -> str:
    """One self-contained page from the report's Markdown: inline CSS, raw HTML escaped, long completions
    folded, and embedded only the `images` (file names) the report drew into `image_dir`."""
    renderer = MarkdownIt("commonmark", {"html": False}).enable("table")
    renderer.add_render_rule("image", _embedded_image)
    renderer.add_render_rule("fence", _folded_completion)
    renderer.add_render_rule("heading_open", _heading_with_anchor)
    own = {name for name in images if Path(name).name == name and (image_dir / name).is_file()}
    body = renderer.render(markdown, {"image_dir": image_dir, "images": own, "anchors": Anchors()})
    return (f"<!doctype html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head>\n<body>\n{body}</body></html>\n")
