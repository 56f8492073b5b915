"""Markdown tables in an answer, rewritten as one "name: role" line per person.

Read as prose, a table's cells run together: in `| Knights | Knaves |` the header is two roles with
no names, and a "Reason" column tells claims that are not the answer. So a table whose header says
what its columns hold is rewritten before the claims are read:

- **Role columns** (`| Knights | Knaves |`, no name column): every name in a column takes its
  header's role -> "knight: Zoey, Liam".
- **Name and role columns** (`| Name | Role |`, `| Person | Knight/Knave | Reason |`): the name
  cell and the role cell of each row -> "Zoey: Knave"; other columns are dropped. A role column
  headed by one role ("Knight?") reads yes / no cells as that role or the other.
- Any other table with a header is read row by row as prose, without the columns that quote
  claims (`| Speaker | Statement | ... |`).

A table with no such header (or no |---| line under it), and a row that lacks the cells, are left
as they are, read as prose.
"""

from __future__ import annotations

from curriculum.tasks.kk.grading.claim_words import REPORTING, ROLE_WORDS, tokenize

NAME_HEADERS = frozenset({"name", "names", "person", "people", "inhabitant", "inhabitants", "character",
                          "characters", "who", "individual", "islander", "speaker"})
ROLE_HEADERS = frozenset({"role", "roles", "identity", "identities", "status", "type", "answer", "verdict",
                          "conclusion", "result", "is"})
YES = frozenset({"yes", "y", "true", "✓", "✔", "✅"})
NO = frozenset({"no", "n", "false", "✗", "✘", "❌"})
_ROLE_NAME = {True: "knight", False: "knave"}


def rewrite_tables(text: str) -> str:
    """`text` with every table that has a telling header rewritten as "name: role" lines.

    >>> print(rewrite_tables("| Knights | Knaves |\\n|---|---|\\n| Zoey | Jacob |\\n| Liam | |"))
    knight: Zoey
    knave: Jacob
    knight: Liam
    >>> print(rewrite_tables("| Person | Role | Why |\\n|:-|:-|:-|\\n| Zoey | Knave | lied about Liam |"))
    Zoey: Knave
    """
    if "|" not in text:
        return text
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        if "|" not in lines[i]:
            out.append(lines[i])
            i += 1
            continue
        end = i
        while end < len(lines) and "|" in lines[end]:
            end += 1
        out.extend(_table(lines[i:end]))
        i = end
    return "\n".join(out)


def _cells(line: str) -> list[str]:
    cells = [c.strip() for c in line.strip().split("|")]
    if cells and not cells[0]:
        cells = cells[1:]
    if cells and not cells[-1]:
        cells = cells[:-1]
    return cells


def _is_rule(cells: list[str]) -> bool:
    """The |---|:---:| line under a header."""
    return bool(cells) and all(c and set(c) <= set("-: ") for c in cells)


def _column(cell: str) -> tuple[str, bool | None]:
    """What a header cell announces: ("name", None), ("role", polarity) for one role ("Knight?"),
    ("role", None) for both ("Knight/Knave", "Identity"), ("report", None) ("Statement"), or ("", None)."""
    words = tokenize(cell)
    polarity = {ROLE_WORDS[w] for w in words if w in ROLE_WORDS}
    if NAME_HEADERS.intersection(words):
        return "name", None
    if len(polarity) == 1:
        return "role", polarity.pop()
    if polarity or ROLE_HEADERS.intersection(words):
        return "role", None
    if REPORTING.intersection(words):
        return "report", None
    return "", None


def _table(lines: list[str]) -> list[str]:
    rows = [_cells(line) for line in lines]
    if len(rows) < 2 or not _is_rule(rows[1]):
        return lines  # no header without the |---| line under it: rows are read as prose
    header = [_column(cell) for cell in rows[0]]
    body = [row for row in rows[1:] if not _is_rule(row)]
    names = [i for i, (kind, _) in enumerate(header) if kind == "name"]
    both = [i for i, (kind, pol) in enumerate(header) if kind == "role" and pol is None]
    single = [i for i, (kind, pol) in enumerate(header) if kind == "role" and pol is not None]
    if names and (both or single):
        role_col = (both or single)[0]
        return [_name_role_line(row, names[0], role_col, header) or line
                for line, row in zip(lines[1:], rows[1:], strict=True) if not _is_rule(row)]
    only_roles = all(kind == "role" or not any(ch.isalpha() for ch in cell)
                     for cell, (kind, _) in zip(rows[0], header, strict=True))
    if single and not both and only_roles:
        return [f"{_ROLE_NAME[header[c][1]]}: {row[c]}" for row in body for c in single if c < len(row) and row[c]]
    kept = [c for c, (kind, _) in enumerate(header) if kind != "report"]  # claims in a column are no answer
    return [" | ".join(row[c] for c in kept if c < len(row)) for row in [rows[0], *body]]


def _name_role_line(row: list[str], name_col: int, role_col: int, header: list[tuple[str, bool | None]]) -> str:
    """"name: role" for one row, or "" when the row lacks either cell."""
    if max(name_col, role_col) >= len(row) or not row[name_col]:
        return ""
    role = row[role_col]
    polarity = header[role_col][1]
    if polarity is not None and role.lower().strip(" *_.") in YES | NO:
        role = _ROLE_NAME[polarity if role.lower().strip(" *_.") in YES else not polarity]
    return f"{row[name_col]}: {role}"
